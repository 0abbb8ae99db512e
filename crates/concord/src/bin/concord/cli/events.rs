//! `concord events TYPE`: the persisted events of an entity type after an offset, one JSON
//! object per line (`GET /persistence/events/TYPE`, docs/PERSISTENCE.md), for a projection
//! or a look at what happened. `--follow` keeps reading as events are committed; the last
//! offset read goes to stderr at the end, to resume with `--from`.

use std::time::Duration;

use clap::Args;

use super::ManagementArg;

/// `concord events`'s arguments.
#[derive(Args)]
pub struct EventsArgs {
    /// The entity type.
    pub entity_type: String,
    /// Read after this offset (`<transaction>.<ordering>`; `0`: from the start).
    #[arg(long, default_value = "0")]
    pub from: String,
    /// The slices of persistence ids, `<min>-<max>` within 0-1023.
    #[arg(long, default_value = "0-1023")]
    pub slices: String,
    /// Keep reading as events are committed (until interrupted).
    #[arg(long)]
    pub follow: bool,
    /// Stop after this many events (default: all).
    #[arg(long)]
    pub max: Option<u64>,
    #[command(flatten)]
    pub m: ManagementArg,
}

/// Runs `concord events`.
pub async fn run(a: EventsArgs) -> anyhow::Result<()> {
    let client = a.m.client()?;
    let mut from = a.from.clone();
    let mut printed = 0u64;
    loop {
        let page = client
            .events_page(&a.entity_type, &from, &a.slices, 500)
            .await?;
        let empty = page.events.is_empty();
        for e in &page.events {
            if a.max.is_some_and(|m| printed >= m) {
                break;
            }
            println!("{e}");
            printed += 1;
            if let Some(o) = e.get("offset").and_then(|o| o.as_str()) {
                from = o.to_string();
            }
        }
        if a.max.is_some_and(|m| printed >= m) || (empty && !a.follow) {
            break;
        }
        if empty {
            tokio::time::sleep(Duration::from_millis(500)).await;
        } else {
            from = page.next;
        }
    }
    eprintln!("next offset: {from}");
    Ok(())
}
