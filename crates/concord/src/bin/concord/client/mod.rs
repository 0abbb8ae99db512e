//! Small clients of a node's HTTP APIs: [`ManagementClient`] (the management API, used by
//! `concord members|join|leave|down|shards` and by `concord demo`) and [`kv::KvClient`] (the
//! key-value API, used by `concord kv`).
//!
//! They belong to the `concord` binary, not to the library; the library's integration tests
//! compile these files as a module of their own (`tests/common/mod.rs`), so they name the
//! library as `concord::` only.

use std::time::Duration;

use concord::cluster_metrics::ClusterMetricsJson;
use concord::management::{ClusterMembersJson, MessageJson};
use concord::sharding::ShardRegionsJson;

pub mod kv;

/// Errors talking to a node's management API.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The node could not be reached.
    #[error("cannot reach the management API at {url}: {source}")]
    Unreachable {
        /// Base URL.
        url: String,
        /// Why.
        source: reqwest::Error,
    },
    /// The node answered with an error.
    #[error("{status}: {message}")]
    Refused {
        /// HTTP status.
        status: u16,
        /// The node's message.
        message: String,
    },
    /// The answer was not the expected JSON.
    #[error("unexpected answer from {url}: {message}")]
    BadAnswer {
        /// Base URL.
        url: String,
        /// What was wrong.
        message: String,
    },
}

/// A page of `GET /persistence/events/{type}`.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct EventsPageJson {
    /// The events' JSON, in offset order.
    pub events: Vec<serde_json::Value>,
    /// The offset to read on from.
    pub next: String,
}

/// Client of one node's management API.
#[derive(Clone)]
pub struct ManagementClient {
    base: String,
    http: reqwest::Client,
    token: Option<String>,
}

impl ManagementClient {
    /// A client for `base` (e.g. `http://127.0.0.1:8558`), with a 3 s timeout per request.
    pub fn new(base: &str) -> Self {
        let http = concord::tls::http_client_builder()
            .timeout(Duration::from_secs(3))
            .build()
            // Nothing here depends on input: a client with no roots and the system
            // resolver always builds.
            .expect("plain HTTP client");
        ManagementClient {
            base: base.trim_end_matches('/').to_string(),
            http,
            token: None,
        }
    }

    /// Speaks HTTPS trusting the authorities in `ca_certificates` (PEM) — without checking
    /// the server's name unless `verify_hostname` (the authority is the cluster's own) —
    /// and presents `identity` (certificate and key PEM files, e.g. `client.root.crt` and
    /// `client.root.key` of `concord certs create-client root`), which authorises the
    /// write routes like the bearer token.
    ///
    /// # Errors
    /// A file that cannot be read or used.
    pub fn with_tls(
        mut self,
        ca_certificates: &std::path::Path,
        identity: Option<(&std::path::Path, &std::path::Path)>,
        verify_hostname: bool,
    ) -> Result<Self, concord::tls::TlsError> {
        let config =
            concord::tls::management_client_config(ca_certificates, identity, verify_hostname)?;
        self.http = reqwest::Client::builder()
            .timeout(Duration::from_secs(3))
            .tls_backend_preconfigured(config)
            .build()
            .map_err(|e| concord::tls::TlsError {
                path: None,
                message: e.to_string(),
            })?;
        Ok(self)
    }

    /// Sends `Authorization: Bearer <token>` with write requests (`management.bearer-token`).
    pub fn with_token(mut self, token: Option<String>) -> Self {
        self.token = token.filter(|t| !t.is_empty());
        self
    }

    fn authorized(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    /// The base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The HTTP client (its TLS settings) and the bearer token, for clients of a node's
    /// other HTTP APIs that follow the same access rules (the key-value API).
    pub(crate) fn http_and_token(&self) -> (&reqwest::Client, Option<&str>) {
        (&self.http, self.token.as_deref())
    }

    fn unreachable(&self, source: reqwest::Error) -> ClientError {
        ClientError::Unreachable {
            url: self.base.clone(),
            source,
        }
    }

    async fn message(&self, resp: reqwest::Response) -> Result<String, ClientError> {
        let status = resp.status();
        let text = resp.text().await.map_err(|e| self.unreachable(e))?;
        let message = serde_json::from_str::<MessageJson>(&text)
            .map(|m| m.message)
            .unwrap_or(text);
        if status.is_success() {
            Ok(message)
        } else {
            Err(ClientError::Refused {
                status: status.as_u16(),
                message,
            })
        }
    }

    /// `GET {path}`, its JSON answer as `T`.
    async fn get_json<T: serde::de::DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        let resp = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .map_err(|e| self.unreachable(e))?;
        if !resp.status().is_success() {
            let status = resp.status().as_u16();
            let text = resp.text().await.unwrap_or_default();
            let message = serde_json::from_str::<MessageJson>(&text)
                .map(|m| m.message)
                .unwrap_or(text);
            return Err(ClientError::Refused { status, message });
        }
        resp.json().await.map_err(|e| ClientError::BadAnswer {
            url: self.base.clone(),
            message: e.to_string(),
        })
    }

    /// `GET /persistence/events/{entity_type}?from=&slices=&limit=`: one page of events
    /// after `from` (see `concord::persistence::routes`).
    pub async fn events_page(
        &self,
        entity_type: &str,
        from: &str,
        slices: &str,
        limit: usize,
    ) -> Result<EventsPageJson, ClientError> {
        let query: String = form_urlencoded::Serializer::new(String::new())
            .append_pair("from", from)
            .append_pair("slices", slices)
            .append_pair("limit", &limit.to_string())
            .finish();
        let t: String = form_urlencoded::byte_serialize(entity_type.as_bytes()).collect();
        self.get_json(&format!("/persistence/events/{t}?{query}"))
            .await
    }

    /// `GET /cluster/metrics`: every member's latest metrics.
    pub async fn cluster_metrics(&self) -> Result<ClusterMetricsJson, ClientError> {
        self.get_json("/cluster/metrics").await
    }

    /// `GET /cluster/services`: the partition table, pending changes, local instances.
    pub async fn services(&self) -> Result<serde_json::Value, ClientError> {
        self.get_json("/cluster/services").await
    }

    /// `GET /cluster/members`.
    pub async fn members(&self) -> Result<ClusterMembersJson, ClientError> {
        self.get_json("/cluster/members").await
    }

    /// `GET /cluster/shards/{name}`: every region of entity type `name` with its shards.
    pub async fn shards(&self, name: &str) -> Result<ShardRegionsJson, ClientError> {
        self.get_json(&format!("/cluster/shards/{name}")).await
    }

    /// `PUT /cluster/members/{address}` with `operation`.
    pub async fn operation(&self, address: &str, operation: &str) -> Result<String, ClientError> {
        let url = format!("{}/cluster/members/{}", self.base, address);
        let resp = self
            .authorized(self.http.put(url))
            .form(&[("operation", operation)])
            .send()
            .await
            .map_err(|e| self.unreachable(e))?;
        self.message(resp).await
    }

    /// `POST /cluster/members` with `address`: the node joins `address`.
    pub async fn join(&self, address: &str) -> Result<String, ClientError> {
        let resp = self
            .authorized(self.http.post(format!("{}/cluster/members", self.base)))
            .form(&[("address", address)])
            .send()
            .await
            .map_err(|e| self.unreachable(e))?;
        self.message(resp).await
    }

    /// `GET /ready`: `Ok(true)` when ready.
    #[allow(dead_code, reason = "no subcommand asks yet; the integration tests do")]
    pub async fn ready(&self) -> Result<bool, ClientError> {
        let resp = self
            .http
            .get(format!("{}/ready", self.base))
            .send()
            .await
            .map_err(|e| self.unreachable(e))?;
        Ok(resp.status().is_success())
    }
}

/// Renders members as a table (NODE, UID, STATUS, ROLES, flags for leader/oldest/unreachable).
pub fn members_table(m: &ClusterMembersJson) -> String {
    let unreachable: std::collections::BTreeSet<&str> =
        m.unreachable.iter().map(|u| u.node.as_str()).collect();
    let rows: Vec<[String; 6]> = m
        .members
        .iter()
        .map(|x| {
            let mut flags = Vec::new();
            if m.leader.as_deref() == Some(x.node.as_str()) {
                flags.push("leader");
            }
            if m.oldest.as_deref() == Some(x.node.as_str()) {
                flags.push("oldest");
            }
            if unreachable.contains(x.node.as_str()) {
                flags.push("UNREACHABLE");
            }
            if x.node == m.self_node {
                flags.push("self");
            }
            [
                x.node.clone(),
                x.node_uid.clone(),
                x.status.clone(),
                x.roles.join(","),
                x.app_version.clone(),
                flags.join(" "),
            ]
        })
        .collect();
    let header = ["NODE", "UID", "STATUS", "ROLES", "APP-VERSION", ""];
    let rows: Vec<Vec<String>> = rows.into_iter().map(Vec::from).collect();
    text_table(&header, &rows)
}

/// Renders `rows` under `header` as left-aligned columns two spaces apart, each line
/// trimmed at its end and ended by a newline.
pub fn text_table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(c.len());
            }
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let cells: Vec<String> = cells.zip(&widths).map(|(c, w)| format!("{c:w$}")).collect();
        cells.join("  ").trim_end().to_string() + "\n"
    };
    let mut out = line(&mut header.iter().copied());
    for r in rows {
        out.push_str(&line(&mut r.iter().map(String::as_str)));
    }
    out
}

/// Renders the regions of an entity type as a table (REGION, SHARDS, ENTITIES) with totals.
pub fn shards_table(r: &ShardRegionsJson) -> String {
    let mut rows: Vec<[String; 3]> = r
        .regions
        .iter()
        .map(|x| {
            [
                x.shard_region.clone(),
                x.shards.len().to_string(),
                x.shards
                    .iter()
                    .map(|s| u64::from(s.num_entities))
                    .sum::<u64>()
                    .to_string(),
            ]
        })
        .collect();
    rows.push([
        "total".to_string(),
        r.regions
            .iter()
            .map(|x| x.shards.len())
            .sum::<usize>()
            .to_string(),
        r.regions
            .iter()
            .flat_map(|x| x.shards.iter())
            .map(|s| u64::from(s.num_entities))
            .sum::<u64>()
            .to_string(),
    ]);
    let header = ["REGION", "SHARDS", "ENTITIES"];
    let mut widths = header.map(str::len);
    for row in &rows {
        for (i, c) in row.iter().enumerate() {
            widths[i] = widths[i].max(c.len());
        }
    }
    let line = |cells: [&str; 3]| {
        format!(
            "{:w0$}  {:>w1$}  {:>w2$}",
            cells[0],
            cells[1],
            cells[2],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2]
        )
    };
    let mut out = line(header);
    out.push('\n');
    for row in &rows {
        out.push_str(&line([&row[0], &row[1], &row[2]]));
        out.push('\n');
    }
    out
}
