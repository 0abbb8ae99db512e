//! A node address as the configuration and the management API give it:
//! `concord://system@host:port` or `host:port`.

use concord_core::address::parse_host_port;
use concord_core::Address;

/// Parses a node address given as `concord://system@host:port` or `host:port` (then in
/// `system`).
pub fn parse_node_address(s: &str, system: &str) -> Result<Address, String> {
    let s = s.trim();
    if s.starts_with("concord://") {
        return s.parse::<Address>().map_err(|e| e.to_string());
    }
    let (host, port) = parse_host_port(s)
        .map_err(|_| format!("`{s}` is neither `concord://system@host:port` nor `host:port`"))?;
    Ok(Address::new(system, host, port))
}
