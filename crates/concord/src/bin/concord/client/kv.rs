//! [`KvClient`]: a client of one node's key-value HTTP API (what `concord kv` uses).

use base64::Engine as _;
use serde_json::Value;

use super::{ClientError, ManagementClient};
use concord::kv::http::CONTEXT_HEADER;

/// What a read answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvAnswer {
    /// The HTTP status: 200 (one value), 300 (siblings) or 404.
    pub status: u16,
    /// The live values (siblings in the store's order).
    pub values: Vec<Vec<u8>>,
    /// The `X-Concord-Context` to write with, if the key exists (or existed).
    pub context: Option<String>,
}

/// Client of one node's key-value API: `base` like `http://127.0.0.1:8098`; TLS settings
/// and the bearer token as the management client's.
#[derive(Clone)]
pub struct KvClient {
    base: String,
    http: reqwest::Client,
    token: Option<String>,
}

impl KvClient {
    /// A client of the API at `management`'s base URL with its TLS settings and token.
    pub fn new(management: &ManagementClient) -> Self {
        let (http, token) = management.http_and_token();
        KvClient {
            base: management.base().to_string(),
            http: http.clone(),
            token: token.map(str::to_string),
        }
    }

    fn url(&self, key: &str, query: &[(&str, String)]) -> Result<reqwest::Url, ClientError> {
        let mut url = reqwest::Url::parse(&format!("{}/kv/", self.base)).map_err(|e| {
            ClientError::BadAnswer {
                url: self.base.clone(),
                message: format!("not a URL: {e}"),
            }
        })?;
        url.path_segments_mut()
            .map_err(|_| ClientError::BadAnswer {
                url: self.base.clone(),
                message: "not a base URL".into(),
            })?
            .pop_if_empty()
            .push(key);
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        Ok(url)
    }

    fn request(
        &self,
        req: reqwest::RequestBuilder,
        context: Option<&str>,
    ) -> reqwest::RequestBuilder {
        let req = match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        };
        match context {
            Some(c) => req.header(CONTEXT_HEADER, c),
            None => req,
        }
    }

    fn unreachable(&self, source: reqwest::Error) -> ClientError {
        ClientError::Unreachable {
            url: self.base.clone(),
            source,
        }
    }

    async fn refused(&self, resp: reqwest::Response) -> ClientError {
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        let message = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v["message"].as_str().map(str::to_string))
            .unwrap_or(text);
        ClientError::Refused { status, message }
    }

    /// `PUT /kv/{key}`.
    ///
    /// # Errors
    /// The node cannot be reached or refused the write (e.g. 503 when W was not reached).
    pub async fn put(
        &self,
        key: &str,
        value: Vec<u8>,
        context: Option<&str>,
        query: &[(&str, String)],
    ) -> Result<(), ClientError> {
        let url = self.url(key, query)?;
        let resp = self
            .request(self.http.put(url), context)
            .body(value)
            .send()
            .await
            .map_err(|e| self.unreachable(e))?;
        if resp.status().is_success() {
            Ok(())
        } else {
            Err(self.refused(resp).await)
        }
    }

    /// `GET /kv/{key}`.
    ///
    /// # Errors
    /// The node cannot be reached or refused the read.
    pub async fn get(&self, key: &str, query: &[(&str, String)]) -> Result<KvAnswer, ClientError> {
        let url = self.url(key, query)?;
        let resp = self
            .request(self.http.get(url), None)
            .send()
            .await
            .map_err(|e| self.unreachable(e))?;
        let status = resp.status().as_u16();
        let context = resp
            .headers()
            .get(CONTEXT_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let bad = |message: String| ClientError::BadAnswer {
            url: self.base.clone(),
            message,
        };
        let values = match status {
            200 => vec![resp
                .bytes()
                .await
                .map_err(|e| self.unreachable(e))?
                .to_vec()],
            300 => {
                let v: Value = resp.json().await.map_err(|e| bad(e.to_string()))?;
                v["siblings"]
                    .as_array()
                    .ok_or_else(|| bad("no siblings in a 300 answer".into()))?
                    .iter()
                    .map(|s| {
                        base64::engine::general_purpose::STANDARD
                            .decode(s.as_str().unwrap_or_default())
                            .map_err(|e| bad(e.to_string()))
                    })
                    .collect::<Result<_, _>>()?
            }
            404 => Vec::new(),
            _ => return Err(self.refused(resp).await),
        };
        Ok(KvAnswer {
            status,
            values,
            context,
        })
    }

    /// `DELETE /kv/{key}`.
    ///
    /// # Errors
    /// The node cannot be reached or refused the delete (404: nothing to delete).
    pub async fn delete(
        &self,
        key: &str,
        context: Option<&str>,
        query: &[(&str, String)],
    ) -> Result<(), ClientError> {
        let url = self.url(key, query)?;
        let resp = self
            .request(self.http.delete(url), context)
            .send()
            .await
            .map_err(|e| self.unreachable(e))?;
        if resp.status().is_success() {
            Ok(())
        } else {
            Err(self.refused(resp).await)
        }
    }

    /// `GET /kv-status`.
    ///
    /// # Errors
    /// The node cannot be reached or refused.
    pub async fn status(&self) -> Result<Value, ClientError> {
        let resp = self
            .request(self.http.get(format!("{}/kv-status", self.base)), None)
            .send()
            .await
            .map_err(|e| self.unreachable(e))?;
        if !resp.status().is_success() {
            return Err(self.refused(resp).await);
        }
        resp.json().await.map_err(|e| ClientError::BadAnswer {
            url: self.base.clone(),
            message: e.to_string(),
        })
    }
}
