//! [`DashboardPanel`]: a layer's section of the live dashboard (`/dashboard`), registered
//! with the node composition when the layer starts ([`crate::layer::LayerStarted::dashboard`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::Value;

/// The future a panel's render returns.
pub type PanelFuture = Pin<Box<dyn Future<Output = Value> + Send>>;

/// A layer's section of the dashboard: a name (`"sharding"`, `"singleton"`, …; the key of
/// the section in the dashboard's JSON, `panels.<name>`) and how to render it as JSON.
///
/// The render runs at most once per dashboard refresh (1 s) whatever the number of
/// viewers, and is bounded by [`PANEL_TIMEOUT`]: a panel that does not answer in time is
/// shown as `{"error": "..."}` and delays nothing else.
#[derive(Clone)]
pub struct DashboardPanel {
    name: &'static str,
    render: Arc<dyn Fn() -> PanelFuture + Send + Sync>,
}

/// How long a panel may take to render before it is shown as unavailable.
pub const PANEL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

impl DashboardPanel {
    /// A panel named `name` rendered by `render` (a JSON object whose shape the
    /// dashboard's script knows for the built-in layers; another layer's panel is shown
    /// as its JSON).
    pub fn new<F, Fut>(name: &'static str, render: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Value> + Send + 'static,
    {
        DashboardPanel {
            name,
            render: Arc::new(move || Box::pin(render()) as PanelFuture),
        }
    }

    /// The panel's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Renders the panel, or `{"error": ...}` after [`PANEL_TIMEOUT`].
    pub async fn render(&self) -> Value {
        match tokio::time::timeout(PANEL_TIMEOUT, (self.render)()).await {
            Ok(v) => v,
            Err(_) => serde_json::json!({
                "error": format!("{} did not answer within {} ms", self.name, PANEL_TIMEOUT.as_millis())
            }),
        }
    }
}

impl std::fmt::Debug for DashboardPanel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DashboardPanel")
            .field("name", &self.name)
            .finish()
    }
}
