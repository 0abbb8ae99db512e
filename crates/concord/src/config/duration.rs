//! Durations in the configuration: strings like `"200ms"`, `"1s"`, `"24h"` (humantime).

use std::time::Duration;

use serde::{Deserialize, Deserializer};
pub(crate) fn de<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s = String::deserialize(d)?;
    humantime::parse_duration(s.trim()).map_err(|e| {
        serde::de::Error::custom(format!(
            "`{s}` is not a duration like \"200ms\" or \"1s\": {e}"
        ))
    })
}
/// Like `de`, plus `"off"` (or `false`) for none.
pub(crate) fn de_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum V {
        B(bool),
        S(String),
    }
    match V::deserialize(d)? {
        V::B(false) => Ok(None),
        V::B(true) => Err(serde::de::Error::custom("expected a duration or \"off\"")),
        V::S(s) if s.trim().eq_ignore_ascii_case("off") => Ok(None),
        V::S(s) => humantime::parse_duration(s.trim()).map(Some).map_err(|e| {
            serde::de::Error::custom(format!(
                "`{s}` is not a duration like \"10s\" or \"off\": {e}"
            ))
        }),
    }
}

/// Milliseconds of `d`, saturating.
pub(crate) fn ms(d: Duration) -> u64 {
    d.as_millis().min(u128::from(u64::MAX)) as u64
}

/// `#[serde(with = "crate::config::duration::required")]`: a duration written as
/// humantime text (`"1s 500ms"`), read by [`de`].
pub(crate) mod required {
    use std::time::Duration;

    use serde::{Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        super::de(d)
    }
}

/// `#[serde(with = "crate::config::duration::optional")]`: like [`required`], `"off"`
/// for none, read by [`de_opt`].
pub(crate) mod optional {
    use std::time::Duration;

    use serde::{Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => super::required::serialize(d, s),
            None => s.serialize_str("off"),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        super::de_opt(d)
    }
}
