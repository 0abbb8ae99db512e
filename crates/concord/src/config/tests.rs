//! Configuration parsing, defaults, overrides and validation.

use std::time::Duration;

use concord_core::settings::ClusterSettings;
use concord_core::split_brain_resolver::DowningStrategy;
use concord_core::Address;

use super::*;

#[test]
fn defaults_match_akka() {
    let c = Config::default();
    assert_eq!(c.remote.port, 25520);
    assert_eq!(c.management.port, 8558);
    let s = c.cluster_settings();
    assert_eq!(s, ClusterSettings::default());
    assert_eq!(s.failure_detector.threshold, 8.0);
    assert_eq!(s.weakly_up_after_ms, Some(7000));
}

#[test]
fn file_keys_are_kebab_case_with_duration_strings() {
    let c = Config::from_toml(
        r#"
        system = "shop"
        [remote]
        hostname = "10.0.0.5"
        port = 2552
        secret = "shop-cluster-secret-0123456789"
        [cluster]
        seed-nodes = ["concord://shop@10.0.0.1:2552", "10.0.0.2:2552"]
        gossip-interval = "200ms"
        allow-weakly-up-members = "off"
        [cluster.role.backend]
        min-nr-of-members = 2
        [cluster.failure-detector]
        acceptable-heartbeat-pause = "5s"
        "#,
    )
    .unwrap();
    let s = c.cluster_settings();
    assert_eq!(s.gossip_interval_ms, 200);
    assert_eq!(s.weakly_up_after_ms, None);
    assert_eq!(s.failure_detector.acceptable_heartbeat_pause_ms, 5000);
    assert_eq!(s.min_nr_of_members_of_role["backend"], 2);
    let seeds = c.seed_node_addresses().unwrap();
    assert_eq!(seeds[1], Address::new("shop", "10.0.0.2", 2552));
}

#[test]
fn bad_values_name_the_key() {
    let e = Config::from_toml("[cluster]\ngossip-interval = \"fast\"").unwrap_err();
    assert_eq!(e.key, "cluster.gossip-interval");
    let e = Config::from_toml("[cluster.failure-detector]\nthreshold = -1.0").unwrap_err();
    assert_eq!(e.key, "cluster.failure-detector.threshold");
    let e = Config::from_toml("[cluster]\ngosip-interval = \"1s\"").unwrap_err();
    assert!(e.message.contains("gosip-interval"), "{e}");
    let e = Config::from_toml("[cluster]\nseed-nodes = [\"nonsense\"]").unwrap_err();
    assert_eq!(e.key, "cluster.seed-nodes");
    let e = Config::from_toml("[remote]\nport = 70000").unwrap_err();
    assert_eq!(e.key, "remote.port");
    let e = Config::from_toml("[cluster.split-brain-resolver]\nactive-strategy = \"keep-newest\"")
        .unwrap_err();
    assert_eq!(e.key, "cluster.split-brain-resolver.active-strategy");
    let e =
        Config::from_toml("[cluster.split-brain-resolver]\nactive-strategy = \"static-quorum\"")
            .unwrap_err();
    assert_eq!(
        e.key,
        "cluster.split-brain-resolver.static-quorum.quorum-size"
    );
    let e = Config::from_toml("[cluster]\ndowning-provider = \"auto\"").unwrap_err();
    assert_eq!(e.key, "cluster.downing-provider");
}

#[test]
fn bootstrap_discovery_and_management_bad_values_name_the_key() {
    let cases = [
        (
            "[bootstrap.contact-point-discovery]\ndiscovery-method = \"consul\"",
            "bootstrap.contact-point-discovery.discovery-method",
        ),
        (
            "[bootstrap.contact-point-discovery]\nrequired-contact-point-nr = 0",
            "bootstrap.contact-point-discovery.required-contact-point-nr",
        ),
        (
            "[bootstrap.contact-point-discovery]\nexponential-backoff-random-factor = 1.5",
            "bootstrap.contact-point-discovery.exponential-backoff-random-factor",
        ),
        (
            "[bootstrap.contact-point]\nprobe-interval = \"0s\"",
            "bootstrap.contact-point.probe-interval",
        ),
        (
            "[discovery.dns]\nname-servers = [\"dns.example\"]",
            "discovery.dns.name-servers",
        ),
        (
            "[discovery.aggregate]\ndiscovery-methods = [\"aggregate\"]",
            "discovery.aggregate.discovery-methods",
        ),
        (
            "[management]\nbearer-token = \"\"",
            "management.bearer-token",
        ),
        (
            "[management]\nenabled = false\n[bootstrap.contact-point-discovery]\nservice-name = \"s\"",
            "management.enabled",
        ),
    ];
    for (toml, key) in cases {
        let e = Config::from_toml(toml).unwrap_err();
        assert_eq!(e.key, key, "{toml}: {e}");
    }
    let e = Config::from_toml("[discovery.config.services.shop]\nendpoints = [{ hots = \"a\" }]")
        .unwrap_err();
    assert!(e.message.contains("hots"), "{e}");
    let ok = Config::from_toml("[bootstrap.contact-point-discovery]\nservice-name = \"shop\"\n[discovery.config.services.shop]\nendpoints = [{ host = \"10.0.0.1\", port = 8558 }, { host = \"10.0.0.2\" }]").unwrap();
    assert!(ok.bootstrap_enabled());
    assert_eq!(ok.discovery.config.services["shop"].endpoints.len(), 2);
    assert_eq!(
        ok.bootstrap.island_watch_interval,
        std::time::Duration::from_secs(30)
    );
    let off = Config::from_toml("[bootstrap]\nisland-watch-interval = \"0s\"").unwrap();
    assert!(off.bootstrap.island_watch_interval.is_zero());
}

#[test]
fn host_address_placeholder_becomes_an_ip() {
    let mut c = Config::default();
    c.remote.hostname = HOST_ADDRESS_PLACEHOLDER.into();
    // A machine without any route cannot resolve it; then the error names the key.
    match c.resolve_host_address() {
        Ok(()) => assert!(c.remote.hostname.parse::<std::net::IpAddr>().is_ok()),
        Err(e) => assert_eq!(e.key, "remote.hostname"),
    }
}

#[test]
fn split_brain_resolver_is_on_by_default_and_can_be_turned_off() {
    let d = Config::default().cluster_settings().downing.unwrap();
    assert_eq!(d.strategy, DowningStrategy::KeepMajority { role: None });
    assert_eq!(d.stable_after_ms, 20_000);
    assert_eq!(d.down_all_when_unstable_ms, Some(15_000));
    let off = Config::from_toml("[cluster]\ndowning-provider = \"none\"").unwrap();
    assert_eq!(off.cluster_settings().downing, None);
    let q = Config::from_toml("[cluster.split-brain-resolver]\nactive-strategy = \"static-quorum\"\nstable-after = \"4s\"\ndown-all-when-unstable = \"off\"\n[cluster.split-brain-resolver.static-quorum]\nquorum-size = 3").unwrap();
    let s = q.cluster_settings().downing.unwrap();
    assert_eq!(
        s.strategy,
        DowningStrategy::StaticQuorum {
            quorum_size: 3,
            role: None
        }
    );
    assert_eq!(s.down_all_when_unstable_ms, None);
}

#[test]
fn environment_overrides_map_to_keys() {
    let o = env_overrides(vec![
        (
            "CONCORD__CLUSTER__GOSSIP_INTERVAL".to_string(),
            "300ms".to_string(),
        ),
        ("CONCORD__REMOTE__PORT".to_string(), "2600".to_string()),
        (
            "CONCORD__CLUSTER__SEED_NODES".to_string(),
            "[\"127.0.0.1:2600\"]".to_string(),
        ),
        ("PATH".to_string(), "/bin".to_string()),
    ]);
    let c = Config::load(None, &o).unwrap();
    assert_eq!(c.cluster.gossip_interval, Duration::from_millis(300));
    assert_eq!(c.remote.port, 2600);
    assert_eq!(c.cluster.seed_nodes, vec!["127.0.0.1:2600".to_string()]);
}

#[test]
fn a_lease_name_of_only_spaces_falls_back_to_the_default_and_names_are_trimmed() {
    let mut c = Config {
        system: "sys".into(),
        ..Config::default()
    };
    assert_eq!(c.lease_name(), "sys-concord-sbr");
    c.cluster.split_brain_resolver.lease_majority.lease_name = "   ".into();
    assert_eq!(c.lease_name(), "sys-concord-sbr");
    c.cluster.split_brain_resolver.lease_majority.lease_name = " \t".into();
    assert_eq!(c.lease_name(), "sys-concord-sbr");
    c.cluster.split_brain_resolver.lease_majority.lease_name = "  my-lease ".into();
    assert_eq!(c.lease_name(), "my-lease");
}
