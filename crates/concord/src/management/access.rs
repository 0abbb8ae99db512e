//! Who may use the write routes (Akka Management's `route-providers-read-only` and its
//! bearer-token authentication, plus client certificates over HTTPS), the names a write
//! may be addressed to, and the body limit. Every request other than GET/HEAD is a write.
//!
//! - any request: more than one `Host`, or a `Host` that is not `host[:port]` (e.g. with
//!   userinfo: `localhost:1@evil.example` names `evil.example`) answers 400 (RFC 9112
//!   §3.2); a body declared larger than `management.max-body-size` answers 413;
//! - read-only: writes are refused with 403;
//! - `Host` (and `Origin`, when present) must name this node (`allowed-hosts`, the
//!   configured and bound names): a page in a browser cannot post to the API through DNS
//!   rebinding or a cross-site form (403);
//! - bearer token and/or client certificates: a write needs `Authorization: Bearer
//!   <token>` or, over HTTPS, a client certificate signed by `management.tls`'s
//!   `ca-certificates` (401 otherwise).
//!
//! Reads — including the bootstrap contact point `GET /bootstrap/seed-nodes`, `/ready`,
//! `/alive` and `/metrics` — are served to anyone who reaches the port.

use std::collections::BTreeSet;
use std::net::SocketAddr;

use axum::extract::{Request, State};
use axum::http::uri::{Authority, Uri};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;

use super::message::message;

/// Marks a request that came over HTTPS with a verified client certificate (inserted by
/// the HTTPS server for each connection).
#[derive(Clone, Debug)]
pub struct VerifiedClientCertificate;

/// Access policy of the management API.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ManagementAccess {
    /// Refuse all writes.
    pub read_only: bool,
    /// Writes may authenticate with this bearer token.
    pub bearer_token: Option<String>,
    /// Writes may authenticate with a verified client certificate (HTTPS); with this set
    /// or a token, an unauthenticated write answers 401.
    pub client_certificates: bool,
    /// Host names (lowercase, no port) a write's `Host` and `Origin` may name; empty: any.
    pub allowed_hosts: BTreeSet<String>,
    /// Largest request body, bytes.
    pub max_body_bytes: usize,
    /// Apply the write rules (authentication, `Host`/`Origin`) to reads too — for APIs
    /// whose reads are data (the key-value API), not cluster state.
    pub guard_reads: bool,
}

impl ManagementAccess {
    /// From `[management]` (see [`crate::config::ManagementConfig::effective_read_only`]),
    /// the bound address and the node's `remote.hostname`.
    pub fn from_config(
        c: &crate::config::ManagementConfig,
        bound: Option<SocketAddr>,
        advertised_host: &str,
    ) -> Self {
        ManagementAccess {
            read_only: c.effective_read_only(),
            bearer_token: c.bearer_token.clone().filter(|t| !t.is_empty()),
            client_certificates: c.tls.is_some(),
            allowed_hosts: allowed_hosts(c, bound, advertised_host),
            max_body_bytes: c.max_body_size,
            guard_reads: false,
        }
    }

    /// A data API's policy (the key-value API's, bound on `hostname` at `bound`): the
    /// management API's write rules (bearer token or client certificate, `Host`/`Origin`
    /// naming this node) for every request, reads included; writes refused only when
    /// `management.read-only` is set explicitly; bodies up to `max_body_bytes`.
    pub fn for_data_api(
        config: &crate::config::Config,
        hostname: &str,
        bound: SocketAddr,
        max_body_bytes: usize,
    ) -> Self {
        let mut m = config.management.clone();
        m.hostname = hostname.to_string();
        ManagementAccess {
            read_only: config.management.read_only == Some(true),
            bearer_token: m.bearer_token.clone().filter(|t| !t.is_empty()),
            client_certificates: m.tls.is_some(),
            allowed_hosts: allowed_hosts(&m, Some(bound), &config.remote.hostname),
            max_body_bytes,
            guard_reads: true,
        }
    }
}

/// `host` without brackets, lowercase.
fn normalize(host: &str) -> String {
    host.trim()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase()
}

/// The names writes may be addressed to.
fn allowed_hosts(
    c: &crate::config::ManagementConfig,
    bound: Option<SocketAddr>,
    advertised_host: &str,
) -> BTreeSet<String> {
    let mut hosts: BTreeSet<String> = c.allowed_hosts.iter().map(|h| normalize(h)).collect();
    let configured = normalize(&c.hostname);
    let unspecified = configured
        .parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_unspecified());
    let loopback = configured == "localhost"
        || configured
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if !unspecified {
        hosts.insert(configured);
    }
    if let Some(b) = bound.filter(|b| !b.ip().is_unspecified()) {
        hosts.insert(b.ip().to_string());
    }
    if !advertised_host.is_empty() {
        hosts.insert(normalize(advertised_host));
    }
    if loopback || unspecified {
        for h in ["localhost", "127.0.0.1", "::1"] {
            hosts.insert(h.to_string());
        }
    }
    hosts
}

/// The host of a `Host` header value: an authority without userinfo, `host[:port]` (RFC
/// 9110 §7.2), parsed by the `http` crate; `None` if the value is not one — e.g.
/// `localhost:1@evil.example`, whose host is `evil.example` behind the userinfo
/// `localhost:1`.
fn host_of(value: &str) -> Option<String> {
    let authority: Authority = value.trim().parse().ok()?;
    if authority.as_str().contains('@') {
        return None;
    }
    let host = authority.host();
    (!host.is_empty()).then(|| normalize(host))
}

/// The host of an `Origin` (`scheme://host[:port]`, RFC 6454 §7); `None` for `null` or a
/// value that is not one.
fn origin_host(value: &str) -> Option<String> {
    let uri: Uri = value.trim().parse().ok()?;
    uri.scheme()?;
    host_of(uri.authority()?.as_str())
}

/// Why the `Host` header makes the request malformed, if it does: more than one, or a
/// value that is not `host[:port]` (RFC 9112 §3.2: answered 400). An absent `Host` is left
/// to [`misaddressed`] (writes need one).
fn malformed_host(headers: &HeaderMap) -> Option<String> {
    let mut hosts = headers.get_all(header::HOST).iter();
    let first = hosts.next()?;
    if hosts.next().is_some() {
        return Some("more than one Host header".into());
    }
    if first.to_str().ok().and_then(host_of).is_some() {
        return None;
    }
    let shown: String = String::from_utf8_lossy(first.as_bytes())
        .chars()
        .take(100)
        .collect();
    Some(format!(
        "malformed Host header `{shown}`: expected host[:port], without userinfo"
    ))
}

/// Constant-time comparison (the token is a secret).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Why a write is addressed wrongly, if it is.
fn misaddressed(access: &ManagementAccess, headers: &HeaderMap) -> Option<String> {
    if access.allowed_hosts.is_empty() {
        return None;
    }
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .and_then(host_of);
    match host {
        None => return Some("a write needs a Host header naming this node".into()),
        Some(h) if !access.allowed_hosts.contains(&h) => {
            return Some(format!(
                "Host `{h}` is not a name of this node; add it to management.allowed-hosts if it is"
            ))
        }
        Some(_) => {}
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let ok = origin
            .to_str()
            .ok()
            .and_then(origin_host)
            .is_some_and(|h| access.allowed_hosts.contains(&h));
        if !ok {
            return Some(format!(
                "cross-origin write refused (Origin `{}`)",
                origin.to_str().unwrap_or("?")
            ));
        }
    }
    None
}

/// Middleware enforcing [`ManagementAccess`].
pub async fn guard(State(access): State<ManagementAccess>, req: Request, next: Next) -> Response {
    if let Some(reason) = malformed_host(req.headers()) {
        return message(StatusCode::BAD_REQUEST, reason);
    }
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > access.max_body_bytes as u64) {
        return message(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "request body larger than {} bytes (management.max-body-size)",
                access.max_body_bytes
            ),
        );
    }
    let read = req.method() == Method::GET || req.method() == Method::HEAD;
    if read && !access.guard_reads {
        return next.run(req).await;
    }
    if access.read_only && !read {
        return message(
            StatusCode::FORBIDDEN,
            "the management API is read-only (management.read-only)",
        );
    }
    if let Some(reason) = misaddressed(&access, req.headers()) {
        return message(StatusCode::FORBIDDEN, reason);
    }
    if access.bearer_token.is_some() || access.client_certificates {
        let by_certificate = req
            .extensions()
            .get::<VerifiedClientCertificate>()
            .is_some();
        let by_token = access.bearer_token.as_ref().is_some_and(|token| {
            let given = req
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .unwrap_or("");
            same(given.as_bytes(), token.as_bytes())
        });
        if !(by_certificate || by_token) {
            let mut r = message(
                StatusCode::UNAUTHORIZED,
                "this route needs `Authorization: Bearer <management.bearer-token>` or a client certificate of management.tls's ca-certificates",
            );
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
            return r;
        }
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_of_parses_hosts_and_origins() {
        assert_eq!(host_of("127.0.0.1:8558").as_deref(), Some("127.0.0.1"));
        assert_eq!(host_of("Example.COM").as_deref(), Some("example.com"));
        assert_eq!(host_of("[::1]:8558").as_deref(), Some("::1"));
        assert_eq!(
            origin_host("https://evil.example:443").as_deref(),
            Some("evil.example")
        );
        assert_eq!(origin_host("http://[::1]:80/x").as_deref(), Some("::1"));
        assert_eq!(origin_host("null"), None);
        assert_eq!(host_of(""), None);
        assert_eq!(host_of(":80"), None);
    }

    #[test]
    fn userinfo_is_not_a_host() {
        // The report: read as `localhost` by splitting at the first colon.
        assert_eq!(host_of("localhost:1@evil.example"), None);
        assert_eq!(host_of("localhost@evil.example"), None);
        assert_eq!(host_of("a b"), None);
        assert_eq!(origin_host("http://localhost:1@evil.example"), None);
        let mut h = HeaderMap::new();
        h.insert(header::HOST, "localhost:1@evil.example".parse().unwrap());
        assert!(malformed_host(&h).is_some());
        h.insert(header::HOST, "localhost:8558".parse().unwrap());
        assert_eq!(malformed_host(&h), None);
        h.append(header::HOST, "evil.example".parse().unwrap());
        assert!(malformed_host(&h).is_some(), "two Host headers");
        assert_eq!(malformed_host(&HeaderMap::new()), None);
    }

    #[test]
    fn allowed_hosts_follow_the_binding() {
        let mut c = crate::config::ManagementConfig::default();
        let hosts = allowed_hosts(&c, "127.0.0.1:8558".parse().ok(), "127.0.0.1");
        assert!(hosts.contains("localhost") && hosts.contains("127.0.0.1"));
        c.hostname = "0.0.0.0".into();
        c.allowed_hosts = vec!["Concord.Default.Svc".into()];
        let hosts = allowed_hosts(&c, "0.0.0.0:8558".parse().ok(), "10.1.2.3");
        assert!(hosts.contains("10.1.2.3") && hosts.contains("concord.default.svc"));
        assert!(hosts.contains("127.0.0.1"));
        assert!(!hosts.contains("0.0.0.0"));
        c.hostname = "10.1.2.3".into();
        let hosts = allowed_hosts(&c, "10.1.2.3:8558".parse().ok(), "10.1.2.3");
        assert!(!hosts.contains("localhost"));
    }
}
