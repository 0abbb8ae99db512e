//! [`KvStore`]: the handle an application uses — `put`, `get`, `delete` with per-request
//! N, R and W — and what it gets back ([`KvValue`], [`Context`]).

use std::time::Duration;

use base64::Engine as _;
use concord_core::ddata::VersionVector;
use concord_core::kv::{
    decode_context, encode_context, KvError, ReadOptions, ReadResult, WriteOptions,
};
use futures_channel::oneshot;
use tokio::sync::mpsc;

use super::command::{KvCommand, KvStatusReport};

/// The causal context of a read: what the client has seen of a key. Pass it back with the
/// next write of the key so that the write supersedes those versions (without it the write
/// is kept next to them as a sibling). Opaque; [`Context::to_token`] makes it a string for
/// HTTP (`X-Concord-Context`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Context(pub(crate) VersionVector);

impl Context {
    /// The context as URL-safe base64 (unpadded).
    pub fn to_token(&self) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(encode_context(&self.0))
    }

    /// A context from [`Context::to_token`]'s string.
    ///
    /// # Errors
    /// Not a context (bad base64, or not a context's bytes).
    pub fn from_token(token: &str) -> Result<Context, KvError> {
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token.trim().trim_end_matches('='))
            .map_err(|e| KvError::Invalid(format!("the context is not base64: {e}")))?;
        decode_context(&bytes)
            .map(Context)
            .map_err(|e| KvError::Invalid(format!("the context is malformed: {e}")))
    }
}

/// What a read found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvValue {
    /// The live values: one, or several siblings written concurrently (in a fixed order);
    /// none when the key is absent or deleted.
    pub values: Vec<Vec<u8>>,
    /// The context to write with (`None` when no replica had the key at all).
    pub context: Option<Context>,
}

impl KvValue {
    /// True if there is no live value (absent, or deleted).
    pub fn is_not_found(&self) -> bool {
        self.values.is_empty()
    }

    fn of(r: ReadResult) -> KvValue {
        match r.object {
            Some(o) => KvValue {
                values: o.values().map(<[u8]>::to_vec).collect(),
                context: Some(Context(o.clock().clone())),
            },
            None => KvValue {
                values: Vec::new(),
                context: None,
            },
        }
    }
}

/// The store's handle; cheap to clone. Calls made before the node started wait for it.
#[derive(Clone)]
pub struct KvStore {
    pub(crate) commands: mpsc::Sender<KvCommand>,
    pub(crate) http: std::sync::Arc<std::sync::OnceLock<std::net::SocketAddr>>,
}

fn stopped() -> KvError {
    KvError::Storage("the key-value store has stopped".into())
}

impl KvStore {
    async fn call<T>(&self, command: impl FnOnce(oneshot::Sender<T>) -> KvCommand) -> Option<T> {
        let (tx, rx) = oneshot::channel();
        let command = match crate::host::trace::current() {
            None => command(tx),
            Some(trace) => KvCommand::Traced {
                command: Box::new(command(tx)),
                trace,
            },
        };
        self.commands.send(command).await.ok()?;
        rx.await.ok()
    }

    /// Writes `value` to `key`. `context` is from the last read of the key (`None`: a blind
    /// write, kept next to existing versions as a sibling). Succeeds once W replicas stored
    /// it durably.
    ///
    /// # Errors
    /// [`KvError::Unavailable`] (naming the replicas that answered) if W was not reached in
    /// time — the replicas that stored it keep it; [`KvError::TooLarge`] over
    /// `kv.max-value-size`; [`KvError::Invalid`] for an empty or over-long key or a bad
    /// `n`/`w`; [`KvError::Overloaded`].
    pub async fn put(
        &self,
        key: &str,
        value: impl Into<Vec<u8>>,
        context: Option<&Context>,
        options: WriteOptions,
    ) -> Result<(), KvError> {
        let value = value.into();
        self.call(|reply| KvCommand::Put {
            key: key.to_string(),
            value,
            context: context.map(|c| c.0.clone()),
            options,
            reply,
        })
        .await
        .unwrap_or_else(|| Err(stopped()))
    }

    /// Reads `key` from R replicas, merged by version.
    ///
    /// # Errors
    /// [`KvError::Unavailable`] if R replicas did not answer in time; [`KvError::Invalid`].
    pub async fn get(&self, key: &str, options: ReadOptions) -> Result<KvValue, KvError> {
        self.call(|reply| KvCommand::Get {
            key: key.to_string(),
            options,
            reply,
        })
        .await
        .unwrap_or_else(|| Err(stopped()))
        .map(KvValue::of)
    }

    /// Deletes `key`: writes a tombstone superseding what `context` has seen (without a
    /// context the key is read first, with the default R).
    ///
    /// # Errors
    /// As [`KvStore::put`]; [`KvError::NotFound`] when there was nothing to delete.
    pub async fn delete(
        &self,
        key: &str,
        context: Option<&Context>,
        options: WriteOptions,
    ) -> Result<(), KvError> {
        self.call(|reply| KvCommand::Delete {
            key: key.to_string(),
            context: context.map(|c| c.0.clone()),
            options,
            reply,
        })
        .await
        .unwrap_or_else(|| Err(stopped()))
    }

    /// The store's status on this node.
    ///
    /// # Errors
    /// The store has stopped.
    pub async fn status(&self) -> Result<KvStatusReport, KvError> {
        self.call(|reply| KvCommand::Status { reply })
            .await
            .ok_or_else(stopped)
    }

    /// Waits until this node holds no key it does not own — every hinted write and every
    /// key of a segment it lost was handed to its owners — or `timeout` passes; true if so.
    pub async fn wait_handoff(&self, timeout: Duration) -> bool {
        tokio::time::timeout(timeout, self.call(|reply| KvCommand::HandoffDone { reply }))
            .await
            .is_ok_and(|r| r.is_some())
    }

    /// The bound address of the HTTP API, once the node started (with `kv.http-port`).
    pub fn http_addr(&self) -> Option<std::net::SocketAddr> {
        self.http.get().copied()
    }
}
