//! Overrides on top of the configuration file: `CONCORD__SECTION__KEY` environment
//! variables and command-line flags, each a dotted key and a raw value.

/// Sets `path` (e.g. `["cluster", "gossip-interval"]`) in a TOML table.
pub(super) fn set_path(root: &mut toml::Table, path: &[String], value: toml::Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut t = root;
    for p in parents {
        let entry = t
            .entry(p.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if !entry.is_table() {
            *entry = toml::Value::Table(toml::Table::new());
        }
        let toml::Value::Table(next) = entry else {
            return;
        };
        t = next;
    }
    t.insert(last.clone(), value);
}

/// Parses an override value: TOML literal if it is one, else a string.
pub(super) fn parse_override_value(raw: &str) -> toml::Value {
    match format!("v = {raw}").parse::<toml::Table>() {
        Ok(mut t) => t
            .remove("v")
            .unwrap_or_else(|| toml::Value::String(raw.to_string())),
        Err(_) => toml::Value::String(raw.to_string()),
    }
}

/// Overrides on top of the file: `(dotted key, raw value)`.
pub type Overrides = Vec<(String, String)>;

/// Environment overrides (`CONCORD__SECTION__KEY=value`) from `vars`.
pub fn env_overrides(vars: impl IntoIterator<Item = (String, String)>) -> Overrides {
    vars.into_iter()
        .filter_map(|(k, v)| {
            let rest = k.strip_prefix("CONCORD__")?;
            let key = rest
                .split("__")
                .map(|p| p.to_ascii_lowercase().replace('_', "-"))
                .collect::<Vec<_>>()
                .join(".");
            Some((key, v))
        })
        .collect()
}
