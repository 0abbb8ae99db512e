//! DNS service discovery against an in-process DNS server (hickory-server): A records and
//! SRV records, looked up directly and used by real nodes to bootstrap a cluster.

mod common;

use std::net::{Ipv4Addr, SocketAddr};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use concord::discovery::{DnsServiceDiscovery, Lookup, ServiceDiscovery};
use hickory_server::net::runtime::TokioRuntimeProvider;
use hickory_server::proto::rr::rdata::{A, SOA, SRV};
use hickory_server::proto::rr::{LowerName, Name, RData, Record};
use hickory_server::store::in_memory::InMemoryZoneHandler;
use hickory_server::zone_handler::{AxfrPolicy, Catalog, ZoneType};
use hickory_server::Server;

const T: Duration = Duration::from_secs(40);
const ZONE: &str = "concord.test.";

/// A DNS server for `concord.test.` on 127.0.0.1 (UDP and TCP), running on its own runtime.
struct DnsServer {
    addr: SocketAddr,
    _rt: tokio::runtime::Runtime,
}

fn name(s: &str) -> Name {
    Name::from_str(s).unwrap()
}

impl DnsServer {
    /// `a`: name → IPv4 addresses; `srv`: SRV name → (target, port).
    fn start(a: &[(&str, Vec<Ipv4Addr>)], srv: &[(&str, Vec<(&str, u16)>)]) -> DnsServer {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let origin = name(ZONE);
        let mut zone = InMemoryZoneHandler::<TokioRuntimeProvider>::empty(
            origin.clone(),
            ZoneType::Primary,
            AxfrPolicy::Deny,
        );
        let soa = SOA::new(
            name("ns.concord.test."),
            name("admin.concord.test."),
            1,
            60,
            60,
            60,
            1,
        );
        zone.upsert_mut(Record::from_rdata(origin.clone(), 1, RData::SOA(soa)), 1);
        for (n, ips) in a {
            for ip in ips {
                zone.upsert_mut(Record::from_rdata(name(n), 1, RData::A(A(*ip))), 1);
            }
        }
        for (n, targets) in srv {
            for (target, port) in targets {
                let rec = SRV::new(0, 10, *port, name(target));
                zone.upsert_mut(Record::from_rdata(name(n), 1, RData::SRV(rec)), 1);
            }
        }
        let mut catalog = Catalog::new();
        catalog.upsert(LowerName::from(origin), vec![Arc::new(zone)]);
        let addr = rt.block_on(async {
            // The resolver uses one port for UDP and TCP: bind UDP on port 0, then TCP on
            // the same number; if another process holds that TCP port, try another.
            let (udp, tcp, addr) = loop {
                let udp = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
                let addr = udp.local_addr().unwrap();
                match tokio::net::TcpListener::bind(addr).await {
                    Ok(tcp) => break (udp, tcp, addr),
                    Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => continue,
                    Err(e) => panic!("binding the DNS server's TCP port {addr}: {e}"),
                }
            };
            let mut server = Server::new(catalog);
            server.register_socket(udp);
            server.register_listener(tcp, Duration::from_secs(5), 4096);
            tokio::spawn(async move {
                let _ = server.block_until_done().await;
            });
            addr
        });
        DnsServer { addr, _rt: rt }
    }
}

fn loopback(last: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, last)
}

#[test]
fn lookup_of_a_records_and_of_srv_records() {
    let dns = DnsServer::start(
        &[
            ("nodes.concord.test.", vec![loopback(11), loopback(12)]),
            ("n1.concord.test.", vec![loopback(1)]),
            ("n2.concord.test.", vec![loopback(2)]),
        ],
        &[(
            "_management._tcp.svc.concord.test.",
            vec![("n1.concord.test.", 18558), ("n2.concord.test.", 18559)],
        )],
    );
    let rt = runtime();
    let d = rt.block_on(async { DnsServiceDiscovery::new(&[dns.addr]).unwrap() });
    let a = rt
        .block_on(d.lookup(&Lookup::new("nodes.concord.test"), Duration::from_secs(3)))
        .unwrap();
    let mut ips: Vec<_> = a.addresses.iter().map(|t| (t.address, t.port)).collect();
    ips.sort();
    assert_eq!(
        ips,
        vec![
            (Some(loopback(11).into()), None),
            (Some(loopback(12).into()), None)
        ]
    );
    let srv = rt
        .block_on(
            d.lookup(
                &Lookup::new("svc.concord.test")
                    .with_port_name("management")
                    .with_protocol("tcp"),
                Duration::from_secs(3),
            ),
        )
        .unwrap();
    let mut got: Vec<_> = srv
        .addresses
        .iter()
        .map(|t| (t.host.clone(), t.port, t.address))
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            (
                "n1.concord.test".into(),
                Some(18558),
                Some(loopback(1).into())
            ),
            (
                "n2.concord.test".into(),
                Some(18559),
                Some(loopback(2).into())
            ),
        ]
    );
    // An unknown name is an error or an empty answer, never a panic.
    let unknown = rt.block_on(d.lookup(&Lookup::new("nope.concord.test"), Duration::from_secs(3)));
    assert!(unknown.map(|r| r.addresses.is_empty()).unwrap_or(true));
}

fn dns_env(dns: SocketAddr, service: &str, srv: bool) -> Vec<(String, String)> {
    let mut env = vec![
        (
            "CONCORD__BOOTSTRAP__CONTACT_POINT_DISCOVERY__SERVICE_NAME".to_string(),
            service.to_string(),
        ),
        (
            "CONCORD__BOOTSTRAP__CONTACT_POINT_DISCOVERY__DISCOVERY_METHOD".into(),
            "dns".into(),
        ),
        (
            "CONCORD__DISCOVERY__DNS__NAME_SERVERS".into(),
            format!("[\"{dns}\"]"),
        ),
        (
            "CONCORD__BOOTSTRAP__CONTACT_POINT_DISCOVERY__REQUIRED_CONTACT_POINT_NR".into(),
            "3".into(),
        ),
    ];
    env.extend(
        BOOTSTRAP_FAST_ENV
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    if srv {
        env.push((
            "CONCORD__BOOTSTRAP__CONTACT_POINT_DISCOVERY__PORT_NAME".into(),
            "management".into(),
        ));
    }
    env
}

fn expect_one_cluster(rt: &tokio::runtime::Runtime, nodes: &[Node]) {
    let refs: Vec<&Node> = nodes.iter().collect();
    let all: Vec<String> = nodes.iter().map(Node::address).collect();
    wait_until("one cluster of 3 from DNS discovery", T, &refs, || {
        all_up(rt, &refs, &all)
    });
    let formers = nodes
        .iter()
        .filter(|n| n.log_text().contains("forming a new cluster"))
        .count();
    assert_eq!(formers, 1);
}

#[test]
fn nodes_bootstrap_from_dns_a_records() {
    let _s = serial();
    let rt = runtime();
    // Three nodes on 127.0.0.21-23, same ports: A records give the hosts, the management
    // port is the fallback port.
    let hosts = [21u8, 22, 23];
    let dns = DnsServer::start(
        &[(
            "nodes.concord.test.",
            hosts.iter().map(|h| loopback(*h)).collect(),
        )],
        &[],
    );
    let env = dns_env(dns.addr, "nodes.concord.test", false);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let (nodes, ()) = start_on_free_ports(2, |p| {
        let nodes = hosts
            .iter()
            .map(|h| Node::start_on(&loopback(*h).to_string(), "dnsa", p[0], p[1], &[], &env))
            .collect();
        (nodes, ())
    });
    expect_one_cluster(&rt, &nodes);
    // The lowest IP formed it.
    assert!(nodes[0].log_text().contains("forming a new cluster"));
}

#[test]
fn nodes_bootstrap_from_dns_srv_records() {
    let _s = serial();
    let rt = runtime();
    // Three nodes on 127.0.0.1 with their own management ports, published as SRV records.
    let targets = ["a.concord.test.", "b.concord.test.", "c.concord.test."];
    let a: Vec<(&str, Vec<Ipv4Addr>)> = targets.iter().map(|t| (*t, vec![loopback(1)])).collect();
    // The SRV records name the ports, so each attempt publishes its own (a new DNS server).
    let (nodes, _dns) = start_on_free_ports(6, |p| {
        let srv: Vec<(&str, u16)> = targets
            .iter()
            .enumerate()
            .map(|(i, t)| (*t, p[2 * i + 1]))
            .collect();
        let dns = DnsServer::start(&a, &[("_management._tcp.srv.concord.test.", srv)]);
        let env = dns_env(dns.addr, "srv.concord.test", true);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let nodes = (0..3)
            .map(|i| Node::start("dnssrv", p[2 * i], p[2 * i + 1], &[], &env))
            .collect();
        (nodes, dns)
    });
    expect_one_cluster(&rt, &nodes);
    // Same IP for all: the host name decides the order, so `a.concord.test` formed it.
    assert!(nodes[0].log_text().contains("forming a new cluster"));
}
