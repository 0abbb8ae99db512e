//! The live cluster dashboard on the management port: `GET /dashboard` (the page; its
//! script and style at `/dashboard/app.js` and `/dashboard/app.css`, embedded in the
//! binary — nothing is fetched from elsewhere), `GET /dashboard/state` (the JSON it shows,
//! see [`snapshot`]) and `GET /dashboard/events` (Server-Sent Events: a `snapshot` event
//! with that JSON at once, then again whenever it changes — checked each second and at
//! each membership change).
//!
//! The page is read-only and served under the management API's access rules (reads are
//! open to whoever reaches the port; over HTTPS when `[management.tls]` is set). Its
//! Content-Security-Policy allows only its own script, style and the event stream.
//!
//! One snapshot is built per refresh whatever the number of viewers (the first viewer to
//! ask builds it, the others wait for it and share it). Each layer's panel
//! ([`DashboardPanel`]) renders in a task of its own, at most one at a time and bounded by
//! [`PANEL_TIMEOUT`]; a snapshot waits 250 ms for the renderings it started, then shows
//! each panel's latest, so that a slow panel never holds back membership.

mod panel;
mod snapshot;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::header;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use futures_util::stream::{self, Stream};
use futures_util::FutureExt;
use serde_json::Value;

pub use panel::{DashboardPanel, PanelFuture, PANEL_TIMEOUT};

use super::state::ManagementState;
use snapshot::FirstSeen;

/// How often a viewer's snapshot is rebuilt when nothing else changed.
pub const REFRESH: Duration = Duration::from_secs(1);

const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");

/// The page's Content-Security-Policy: its own script, style and connections only.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

struct Cache {
    /// When the last snapshot was built, the membership version it shows, and its text.
    built: Option<(Instant, u64, Arc<String>)>,
    first_seen: FirstSeen,
}

/// A panel's latest rendering, and whether one is under way.
#[derive(Default)]
struct PanelSlot {
    value: Option<Value>,
    rendered_at: Option<Instant>,
    rendering: bool,
}

/// How long a snapshot waits for the panel renderings it started before it shows their
/// previous ones (a slow panel — a shard query waiting for a crashed node — never holds
/// back membership).
const PANEL_WAIT: Duration = Duration::from_millis(250);

/// Builds and shares the dashboard's snapshots.
#[derive(Clone)]
pub(crate) struct DashboardHub {
    state: ManagementState,
    cache: Arc<tokio::sync::Mutex<Cache>>,
    slots: Arc<Vec<std::sync::Mutex<PanelSlot>>>,
}

impl DashboardHub {
    pub(crate) fn new(state: ManagementState) -> Self {
        let slots = state.panels.iter().map(|_| Default::default()).collect();
        DashboardHub {
            state,
            cache: Arc::new(tokio::sync::Mutex::new(Cache {
                built: None,
                first_seen: FirstSeen::default(),
            })),
            slots: Arc::new(slots),
        }
    }

    /// Starts a rendering of every panel whose last one is older than half of [`REFRESH`]
    /// and none is under way; each ends by filling its slot. Returns the receivers of
    /// the ends of those started.
    fn start_renderings(&self) -> Vec<tokio::sync::oneshot::Receiver<()>> {
        let mut started = Vec::new();
        for (i, panel) in self.state.panels.iter().enumerate() {
            {
                let mut slot = self.slots[i].lock().unwrap_or_else(|p| p.into_inner());
                if slot.rendering || slot.rendered_at.is_some_and(|t| t.elapsed() < REFRESH / 2) {
                    continue;
                }
                slot.rendering = true;
            }
            let (done, rx) = tokio::sync::oneshot::channel();
            let (panel, slots) = (panel.clone(), self.slots.clone());
            tokio::spawn(async move {
                let value = match std::panic::AssertUnwindSafe(panel.render())
                    .catch_unwind()
                    .await
                {
                    Ok(v) => v,
                    Err(_) => serde_json::json!({"error": format!("{} panicked", panel.name())}),
                };
                let mut slot = slots[i].lock().unwrap_or_else(|p| p.into_inner());
                *slot = PanelSlot {
                    value: Some(value),
                    rendered_at: Some(Instant::now()),
                    rendering: false,
                };
                let _ = done.send(());
            });
            started.push(rx);
        }
        started
    }

    /// The current snapshot (JSON text), rebuilt when the last is older than half of
    /// [`REFRESH`] or (`fresh`: after a membership change) shows an older membership.
    async fn snapshot(&self, fresh: bool) -> Arc<String> {
        let mut cache = self.cache.lock().await;
        let version = self.state.cluster.view().version;
        if let Some((at, shown, s)) = &cache.built {
            // After a membership change, one rebuild serves every viewer woken by it.
            if at.elapsed() < REFRESH / 2 && (!fresh || *shown == version) {
                return s.clone();
            }
        }
        let started = self.start_renderings();
        let _ = tokio::time::timeout(PANEL_WAIT, futures_util::future::join_all(started)).await;
        let mut json = snapshot::core_json(&self.state, &mut cache.first_seen);
        let panels: serde_json::Map<String, Value> = self
            .state
            .panels
            .iter()
            .zip(self.slots.iter())
            .map(|(p, slot)| {
                let slot = slot.lock().unwrap_or_else(|p| p.into_inner());
                let v = slot
                    .value
                    .clone()
                    .unwrap_or_else(|| serde_json::json!({"loading": true}));
                (p.name().to_string(), v)
            })
            .collect();
        json.insert("panels".into(), Value::Object(panels));
        let text = Arc::new(Value::Object(json).to_string());
        cache.built = Some((Instant::now(), version, text.clone()));
        text
    }
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::X_FRAME_OPTIONS, "DENY"),
        ],
        body,
    )
        .into_response()
}

async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX_HTML)
}

async fn app_js() -> Response {
    asset("text/javascript; charset=utf-8", APP_JS)
}

async fn app_css() -> Response {
    asset("text/css; charset=utf-8", APP_CSS)
}

async fn state(State(hub): State<DashboardHub>) -> Response {
    let text = hub.snapshot(false).await;
    (
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        text.as_ref().clone(),
    )
        .into_response()
}

/// The event stream: a snapshot at once, then each changed one.
fn snapshots(hub: DashboardHub) -> impl Stream<Item = Result<Event, Infallible>> {
    let membership = hub.state.cluster.membership();
    stream::unfold(
        (hub, membership, None::<Arc<String>>, false),
        |(hub, mut membership, last, mut fresh)| async move {
            loop {
                let snap = hub.snapshot(fresh).await;
                fresh = false;
                let changed = last.as_ref().is_none_or(|l| **l != *snap);
                if changed {
                    let ev = Event::default().event("snapshot").data(snap.as_str());
                    return Some((Ok(ev), (hub, membership, Some(snap), false)));
                }
                tokio::select! {
                    r = membership.changed() => {
                        if r.is_ok() {
                            fresh = true;
                        } else {
                            tokio::time::sleep(REFRESH).await;
                        }
                    }
                    _ = tokio::time::sleep(REFRESH) => {}
                }
            }
        },
    )
}

async fn events(State(hub): State<DashboardHub>) -> Response {
    Sse::new(snapshots(hub))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

/// The dashboard's routes over `state` (its panels included).
pub(crate) fn routes(state: ManagementState) -> Router {
    Router::new()
        .route("/dashboard", get(index))
        .route("/dashboard/", get(index))
        .route("/dashboard/app.js", get(app_js))
        .route("/dashboard/app.css", get(app_css))
        .route("/dashboard/state", get(self::state))
        .route("/dashboard/events", get(events))
        .with_state(DashboardHub::new(state))
}
