//! Sections a layer owns: `[distributed-data]`, `[singleton]`, `[singleton-proxy]`,
//! `[sharding]`, `[kv]`, and any application layer's own.
//!
//! The node's own sections (`system`, `[remote]`, `[cluster]`, `[management]`, ...) are
//! [`Config`]'s fields. Every other top-level table is kept as TOML in
//! [`Config::sections`] and parsed by the layer that owns it, whose section type lives in
//! the layer's folder and implements [`ConfigSection`] — as an Akka extension reads its own
//! path (`akka.cluster.sharding`) of the system's configuration. File, environment and
//! command-line overrides reach these sections exactly as they reach the node's.

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::error::ConfigError;
use super::node_config::Config;

/// A layer's configuration section: a serde type with defaults for every key, read from
/// the top-level table [`ConfigSection::KEY`].
pub trait ConfigSection: Serialize + DeserializeOwned + Default + Clone {
    /// The section's top-level key, e.g. `"sharding"` for `[sharding]`.
    const KEY: &'static str;

    /// Checks values that parse but make no sense, some against the node's own sections
    /// (`config`); errors name the full key (`kv.n`).
    fn validate(&self, config: &Config) -> Result<(), ConfigError> {
        let _ = config;
        Ok(())
    }
}

impl Config {
    /// Section `T`: its table from the file and overrides, defaults for absent keys,
    /// validated.
    ///
    /// # Errors
    /// [`ConfigError`] naming the key (`sharding.number-of-shards`) of a value of the wrong
    /// type, an unknown key, or a value [`ConfigSection::validate`] refuses.
    pub fn section<T: ConfigSection>(&self) -> Result<T, ConfigError> {
        let section = self.parse_section::<T>()?;
        section.validate(self)?;
        Ok(section)
    }

    /// Replaces section `T` (programmatic configuration: what a file would say).
    ///
    /// # Errors
    /// [`ConfigError`] if the section cannot be written as TOML: an integer above
    /// `i64::MAX` (TOML's largest), or a map with non-string keys (none of Concord's
    /// sections has one).
    pub fn set_section<T: ConfigSection>(&mut self, section: &T) -> Result<(), ConfigError> {
        let value = toml::Value::try_from(section).map_err(|e| {
            ConfigError::new(
                T::KEY,
                format!(
                    "cannot be written as TOML (integers up to {}): {e}",
                    i64::MAX
                ),
            )
        })?;
        self.sections.insert(T::KEY.to_string(), value);
        Ok(())
    }

    /// Changes section `T` with `change` (unvalidated: [`Config::section`] validates it
    /// when the layer reads it), e.g.
    /// `config.update_section(|kv: &mut KvConfig| kv.http_port = Some(0))`.
    ///
    /// # Errors
    /// As [`Config::set_section`], or if the section as it stands does not parse.
    pub fn update_section<T: ConfigSection>(
        &mut self,
        change: impl FnOnce(&mut T),
    ) -> Result<(), ConfigError> {
        let mut section = self.parse_section::<T>()?;
        change(&mut section);
        self.set_section(&section)
    }

    fn parse_section<T: ConfigSection>(&self) -> Result<T, ConfigError> {
        let Some(value) = self.sections.get(T::KEY) else {
            return Ok(T::default());
        };
        serde_path_to_error::deserialize(value.clone()).map_err(|e| {
            let path = e.path().to_string();
            let msg = e.inner().to_string();
            let msg = msg.lines().next().unwrap_or_default().to_string();
            let key = if path == "." {
                T::KEY.to_string()
            } else {
                format!("{}.{path}", T::KEY)
            };
            ConfigError::new(key, msg)
        })
    }
}
