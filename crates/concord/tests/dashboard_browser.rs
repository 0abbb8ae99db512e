//! The live dashboard in a real browser: headless Chromium (Debian's `chromium`, driven
//! through Debian's `chromium-driver` by the `fantoccini` WebDriver client; both are
//! installed by README's test command, `scripts/ensure-chromium`).
//!
//! Three `concord node` processes; the page of the first shows the three members' rows;
//! one node is SIGKILLed and its row turns unreachable, then (downed) disappears, without
//! the page being reloaded. Screenshots are written under `target/tmp/`. The page is then
//! opened offline (`?offline`) and rendered with a synthetic cluster of 100 members and
//! 10,000 shards: the times to first render and to apply an update are printed (figures in
//! docs/BENCHMARKS.md, never asserted).

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use fantoccini::{Client, ClientBuilder};
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(60);

/// `chromedriver` on a port it picks itself (`--port=0`, read back from its first lines).
struct ChromeDriver {
    child: Child,
    port: u16,
}

impl ChromeDriver {
    fn start() -> ChromeDriver {
        let mut child = Command::new("chromedriver")
            .arg("--port=0")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect(
                "chromedriver (Debian's chromium-driver) is needed by the dashboard test: \
                 run scripts/ensure-chromium, or README's test command",
            );
        let out = child.stdout.take().expect("chromedriver's stdout");
        let mut lines = BufReader::new(out).lines();
        let port = loop {
            let line = lines
                .next()
                .expect("chromedriver exited before naming its port")
                .expect("chromedriver's output");
            if let Some(rest) = line.split("started successfully on port ").nth(1) {
                break rest
                    .trim_end_matches('.')
                    .trim()
                    .parse::<u16>()
                    .expect("a port number");
            }
        };
        // Keep reading its stdout so that it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        ChromeDriver { child, port }
    }
}

impl Drop for ChromeDriver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn browser(driver: &ChromeDriver, profile: &std::path::Path) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": "/usr/bin/chromium",
            "args": [
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--window-size=1400,1100",
                format!("--user-data-dir={}", profile.display()),
            ],
        }),
    );
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    ClientBuilder::new(connector)
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{}", driver.port))
        .await
        .expect("a Chromium session through chromedriver")
}

/// The members' rows as the page shows them: (node, status, reachable).
async fn rows(c: &Client) -> Vec<(String, String, bool)> {
    let v = c
        .execute(
            "return Array.from(document.querySelectorAll('#members tbody tr'))
                .map(r => [r.dataset.node, r.dataset.status, r.dataset.reachable === 'true']);",
            vec![],
        )
        .await
        .expect("the rows script runs");
    serde_json::from_value(v).unwrap_or_default()
}

async fn wait_rows(
    c: &Client,
    what: &str,
    nodes: &[&Node],
    cond: impl Fn(&[(String, String, bool)]) -> bool,
) -> Vec<(String, String, bool)> {
    let start = Instant::now();
    loop {
        let r = rows(c).await;
        if cond(&r) {
            return r;
        }
        if start.elapsed() > T {
            for n in nodes {
                eprintln!("---- log of {} ----\n{}", n.address(), n.log_text());
            }
            panic!("timed out waiting for the page to show {what}; it shows {r:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn screenshot(c: &Client, name: &str) {
    let png = c.screenshot().await.expect("a screenshot");
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::write(&path, png).expect("the screenshot is written");
    eprintln!("screenshot: {}", path.display());
}

/// The synthetic snapshot: `members` members and `shards` shards over them, one
/// unreachable member seen by two others, `handoffs` shards reported by two regions.
fn synthetic(members: usize, shards: usize, handoffs: usize, generation: u64) -> Value {
    let addr = |i: usize| format!("concord://big@10.0.{}.{}:25520", i / 250, i % 250 + 1);
    let rows: Vec<Value> = (0..members)
        .map(|i| {
            json!({
                "node": addr(i), "uid": (i as u64 * 7919 + generation).to_string(), "status": "Up",
                "roles": ["backend", format!("dc-{}", i % 3)], "appVersion": "1.2.3",
                "upNumber": i + 1, "self": i == 0, "leader": i == 0, "oldest": i == 0,
                "reachable": i != 7, "observedBy": if i == 7 { vec![addr(1), addr(2)] } else { vec![] },
                "seenForMs": 60_000 + generation * 1000,
            })
        })
        .collect();
    let mut regions: Vec<Vec<Value>> = vec![Vec::new(); members];
    for s in 0..shards {
        regions[s % members].push(json!([s.to_string(), (s + generation as usize) % 17]));
    }
    for s in 0..handoffs {
        regions[(s + 1) % members].push(json!([s.to_string(), 0]));
    }
    let regions: Vec<Value> = regions
        .into_iter()
        .enumerate()
        .map(|(i, shards)| json!({"region": addr(i), "shards": shards}))
        .collect();
    json!({
        "self": addr(0), "system": "big", "generatedAtMs": 1_800_000_000_000u64 + generation * 1000,
        "uptimeMs": 3_600_000, "leader": addr(0), "oldest": addr(0), "clusterId": "00000000deadbeef",
        "members": rows,
        "reachability": {"observers": [addr(1), addr(2)], "subjects": [addr(7)], "unreachable": [[0, 0], [1, 0]]},
        "sbrDecisions": [{"atMs": 1_800_000_000_000u64, "decision": "DownUnreachable", "cause": "stable", "nodes": [addr(99)]}],
        "traffic": {"messagesIn": generation * 50_000, "messagesOut": generation * 48_000, "bytesIn": 0, "bytesOut": 0,
                    "heartbeatRttMs": 1 + generation % 3, "gossipRounds": generation, "sbrDecisions": 1},
        "panels": {
            "sharding": {"types": [{"name": "device", "regions": regions,
                                    "handoffs": (0..handoffs).map(|s| s.to_string()).collect::<Vec<_>>()}]},
            "singleton": {"singletons": [{"name": "scheduler", "role": null, "state": "Oldest", "runningHere": true,
                                          "runsOn": addr(0), "buffered": 0}]},
        },
    })
}

/// Applies `state` in the page as a `snapshot` event would (parses its JSON text, renders,
/// and forces the layout) and returns how long it took, ms, as the page measures it.
async fn render_ms(c: &Client, state: &Value) -> f64 {
    let v = c
        .execute(
            "const t0 = performance.now();
             window.concordDashboard.render(JSON.parse(arguments[0]));
             document.body.getBoundingClientRect();
             return performance.now() - t0;",
            vec![Value::String(state.to_string())],
        )
        .await
        .expect("render runs");
    v.as_f64().expect("a time")
}

#[test]
fn the_dashboard_shows_a_crash_live_in_chromium() {
    let _s = serial();
    let rt = runtime();
    let first = Node::start_bound("dash", &[], &[]);
    let seeds = [first.port];
    let mut nodes = vec![first];
    nodes.push(Node::start_bound("dash", &seeds, &[]));
    nodes.push(Node::start_bound("dash", &seeds, &[]));
    let all: Vec<String> = nodes.iter().map(Node::address).collect();
    {
        let refs: Vec<&Node> = nodes.iter().collect();
        wait_until("3 members Up on every node", T, &refs, || {
            all_up(&rt, &refs, &all)
        });
    }

    let driver = ChromeDriver::start();
    let profile = tempfile::tempdir().unwrap();
    rt.block_on(async {
        let c = browser(&driver, profile.path()).await;
        let page = format!("{}/dashboard", nodes[0].management_url());
        c.goto(&page).await.expect("the page loads");
        let refs: Vec<&Node> = nodes.iter().collect();
        wait_rows(&c, "three Up, reachable members", &refs, |r| {
            r.len() == 3 && r.iter().all(|(_, s, ok)| s == "Up" && *ok)
        })
        .await;
        let shown: Vec<String> = rows(&c).await.into_iter().map(|r| r.0).collect();
        let mut expected = all.clone();
        expected.sort();
        assert_eq!(shown, expected, "one row per member, by address");
        // A mark that a reload would wipe.
        c.execute("window.__noReload = 42; return null;", vec![])
            .await
            .unwrap();
        let stream: String = c
            .execute(
                "return document.getElementById('stream').textContent;",
                vec![],
            )
            .await
            .unwrap()
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert_eq!(stream, "live");
        screenshot(&c, "dashboard-3-up.png").await;

        // SIGKILL the third node: its row turns unreachable, live.
        let victim = all[2].clone();
        nodes[2].kill9();
        let survivors: Vec<&Node> = nodes[..2].iter().collect();
        wait_rows(&c, "the killed node unreachable", &survivors, |r| {
            r.iter().any(|(n, _, ok)| *n == victim && !ok)
        })
        .await;
        screenshot(&c, "dashboard-unreachable.png").await;

        // Downed through the API: its row disappears, live.
        nodes[1]
            .client()
            .operation(&victim, "Down")
            .await
            .expect("the down request");
        let r = wait_rows(&c, "the killed node removed", &survivors, |r| {
            r.len() == 2 && r.iter().all(|(_, s, ok)| s == "Up" && *ok)
        })
        .await;
        assert!(r.iter().all(|(n, _, _)| *n != victim), "{r:?}");
        screenshot(&c, "dashboard-removed.png").await;
        let mark = c
            .execute("return window.__noReload;", vec![])
            .await
            .unwrap();
        assert_eq!(mark, json!(42), "the page was not reloaded");

        // Rendering at 100 members and 10,000 shards (measured, printed, not asserted).
        c.goto(&format!("{page}?offline")).await.unwrap();
        let big = synthetic(100, 10_000, 50, 1);
        eprintln!(
            "synthetic snapshot: {} bytes of JSON",
            big.to_string().len()
        );
        let first_ms = render_ms(&c, &big).await;
        let mut updates = Vec::new();
        for g in 2..12 {
            updates.push(render_ms(&c, &synthetic(100, 10_000, 50, g)).await);
        }
        updates.sort_by(|a, b| a.total_cmp(b));
        let shown = rows(&c).await;
        assert_eq!(shown.len(), 100, "100 members rendered");
        assert_eq!(shown.iter().filter(|r| !r.2).count(), 1);
        let regions: i64 = c
            .execute(
                "return document.querySelectorAll('#panel-sharding tr[data-region]').length;",
                vec![],
            )
            .await
            .unwrap()
            .as_i64()
            .unwrap();
        assert_eq!(regions, 100, "one row per region");
        eprintln!(
            "dashboard render, 100 members and 10,000 shards: first {first_ms:.1} ms, \
             update median {:.1} ms (max {:.1} ms, 10 updates)",
            updates[updates.len() / 2],
            updates[updates.len() - 1]
        );
        screenshot(&c, "dashboard-100-members-10000-shards.png").await;
        c.close().await.unwrap();
    });
}
