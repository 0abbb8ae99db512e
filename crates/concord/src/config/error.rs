//! [`ConfigError`]: a configuration problem, naming its key.

/// A configuration problem, naming the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid configuration `{key}`: {message}")]
pub struct ConfigError {
    /// Dotted key path, e.g. `cluster.failure-detector.threshold`.
    pub key: String,
    /// What is wrong.
    pub message: String,
}

impl ConfigError {
    pub(crate) fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError {
            key: key.into(),
            message: message.into(),
        }
    }
}
