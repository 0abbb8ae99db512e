//! The envelope on a real socket: a peer written by hand (raw TCP, protobuf frames) sends
//! a protocol this node does not run and a membership message type this build does not
//! know. Both are counted and dropped; the connection stays open — the peer's next,
//! valid message on the same connection is answered — and the node stays Up. And order is
//! kept per (sender, receiver, lane), whichever way the messages are sent.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use common::{fast_config, port_of, start_first, wait_self_up};
use concord::cluster::codec::manifest;
use concord::layer::{Layer, LayerContext, LayerError, LayerStarted};
use concord::remote::wire;
use concord::remote::{Frame, ProtocolRegistry, TransportSettings, PROTOCOL_VERSION};
use concord::Node;
use concord_core::{Lane, MemberStatus, ProtocolId};
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const T: Duration = Duration::from_secs(20);

async fn write_frame(s: &mut TcpStream, body: &[u8]) {
    let mut b = BytesMut::new();
    b.put_u32(body.len() as u32);
    b.put_slice(body);
    s.write_all(&b).await.unwrap();
}

async fn read_frame(s: &mut TcpStream) -> Bytes {
    let len = s.read_u32().await.unwrap() as usize;
    let mut body = vec![0; len];
    s.read_exact(&mut body).await.unwrap();
    Bytes::from(body)
}

fn envelope(protocol: u32, manifest: u32, payload: Vec<u8>) -> Vec<u8> {
    wire::Envelope {
        protocol,
        manifest,
        payload: payload.into(),
        recipient_uid: 0,
        trace: Default::default(),
    }
    .encode_to_vec()
}

fn addr(system: &str, port: u16) -> wire::Address {
    wire::Address {
        system: system.into(),
        host: "127.0.0.1".into(),
        port: u32::from(port),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_protocols_and_message_types_are_counted_and_dropped_and_the_connection_stays() {
    let node = start_first(fast_config("wire", &[])).await;
    wait_self_up(&node).await;
    let system = "wire";
    // The fake peer listens where it says it lives: the node answers over its own
    // outbound connection.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let my_port = listener.local_addr().unwrap().port();
    let me = wire::UniqueAddress {
        address: Some(addr(system, my_port)),
        uid: 4242,
    };

    let mut conn = TcpStream::connect(node.remoting_addr()).await.unwrap();
    let hs = wire::Handshake {
        from: Some(me.clone()),
        to: Some(addr(system, node.remoting_addr().port())),
        protocol_version: PROTOCOL_VERSION,
        cluster_name: system.into(),
        lane: Lane::Control.index() as u32,
        nonce: Default::default(),
    };
    write_frame(&mut conn, &hs.encode_to_vec()).await;
    let reply = wire::HandshakeReply::decode(read_frame(&mut conn).await).unwrap();
    assert!(matches!(
        reply.result,
        Some(wire::handshake_reply::Result::Accepted(_))
    ));

    let stats = node.transport().stats();
    // 1. A protocol this node does not run.
    write_frame(&mut conn, &envelope(7777, 1, b"from the future".to_vec())).await;
    // 2. A membership message type this build does not know.
    write_frame(
        &mut conn,
        &envelope(ProtocolId::MEMBERSHIP.0, 99, b"new message".to_vec()),
    )
    .await;
    // 3. Then a valid InitJoin on the same connection.
    write_frame(
        &mut conn,
        &envelope(
            ProtocolId::MEMBERSHIP.0,
            manifest::INIT_JOIN,
            wire::Empty {}.encode_to_vec(),
        ),
    )
    .await;

    // The node answers the InitJoin: it connects to the fake peer and sends InitJoinAck.
    let (mut back, _) = tokio::time::timeout(T, listener.accept())
        .await
        .expect("the node connects back")
        .unwrap();
    let hs_back = wire::Handshake::decode(read_frame(&mut back).await).unwrap();
    assert_eq!(hs_back.cluster_name, system);
    let accept = wire::HandshakeReply {
        result: Some(wire::handshake_reply::Result::Accepted(me.clone())),
        quarantined: false,
    };
    write_frame(&mut back, &accept.encode_to_vec()).await;
    let answer = tokio::time::timeout(T, read_frame(&mut back))
        .await
        .expect("an answer to the InitJoin");
    let env = wire::Envelope::decode(answer).unwrap();
    assert_eq!(env.protocol, ProtocolId::MEMBERSHIP.0);
    assert_eq!(
        env.manifest,
        manifest::INIT_JOIN_ACK,
        "the InitJoin sent after the unknown messages was handled"
    );
    assert_eq!(env.recipient_uid, 4242);

    use std::sync::atomic::Ordering::Relaxed;
    assert_eq!(stats.unknown_protocol.load(Relaxed), 1);
    let membership = stats.protocol(ProtocolId::MEMBERSHIP).unwrap();
    assert_eq!(membership.inbound.unknown_messages.load(Relaxed), 1);
    assert_eq!(
        stats.malformed_frames.load(Relaxed),
        0,
        "nothing was malformed"
    );

    // The metrics an operator sees.
    let metrics = reqwest::get(format!(
        "http://{}/metrics",
        node.management_addr().unwrap()
    ))
    .await
    .unwrap()
    .text()
    .await
    .unwrap();
    assert!(
        metrics.contains("concord_remote_unknown_protocol_total"),
        "{metrics}"
    );
    assert!(metrics
        .lines()
        .any(|l| l.starts_with("concord_remote_unknown_messages_total")
            && l.contains("protocol=\"membership\"")
            && l.ends_with(" 1")));

    // The connection is still open: the node has not closed it (a read would see EOF).
    let mut probe = [0u8; 1];
    let still_open = tokio::time::timeout(Duration::from_millis(300), conn.read(&mut probe)).await;
    assert!(still_open.is_err(), "no EOF: the connection stays open");

    // A malformed envelope, by contrast, closes that one connection, and is counted.
    write_frame(&mut conn, &[0xff, 0xff, 0xff]).await;
    let closed = tokio::time::timeout(T, conn.read(&mut probe))
        .await
        .unwrap();
    assert!(matches!(closed, Ok(0) | Err(_)), "closed after garbage");
    assert_eq!(stats.malformed_frames.load(Relaxed), 1);

    // The cluster is unaffected.
    assert_eq!(
        node.cluster().view().self_member().map(|m| m.status),
        Some(MemberStatus::Up)
    );
    drop(back);
    node.stop().await;
}

/// A layer that records the sequence numbers (8-byte payloads) it receives, in order.
struct SeqLayer {
    seen: Arc<Mutex<Vec<u64>>>,
    inbound: Option<tokio::sync::mpsc::Receiver<concord::remote::Inbound<Bytes>>>,
}

const SEQ: ProtocolId = ProtocolId(ProtocolId::FIRST_APPLICATION_ID + 3);

impl Layer for SeqLayer {
    fn name(&self) -> &'static str {
        "seq"
    }
    fn register(
        &mut self,
        registry: &mut ProtocolRegistry,
        settings: &TransportSettings,
    ) -> Result<(), LayerError> {
        let rx = registry
            .register(
                SEQ,
                Arc::new(common::bench_layer::RawCodec),
                settings.inbound_queue_size,
            )
            .map_err(|e| LayerError::DuplicateProtocol {
                layer: "seq",
                protocol: e.0,
            })?;
        self.inbound = Some(rx);
        Ok(())
    }
    fn start(self: Box<Self>, _ctx: LayerContext) -> Result<LayerStarted, LayerError> {
        let (Some(mut rx), seen) = (self.inbound, self.seen) else {
            return Ok(LayerStarted::default());
        };
        tokio::spawn(async move {
            while let Some(batch) = rx.recv().await {
                let mut s = seen.lock().unwrap();
                for (payload, _) in batch.messages {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(&payload[..8]);
                    s.push(u64::from_be_bytes(b));
                }
            }
        });
        Ok(LayerStarted::default())
    }
}

/// A peer of a newer, incompatible wire protocol is refused at the handshake with a reason
/// naming both versions (docs/UPGRADES.md), and nothing it sends is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handshake_of_a_newer_incompatible_protocol_version_is_refused() {
    let node = start_first(fast_config("future", &[])).await;
    wait_self_up(&node).await;
    let refused_before = node
        .transport()
        .stats()
        .handshakes_refused
        .load(std::sync::atomic::Ordering::Relaxed);
    let mut conn = TcpStream::connect(node.remoting_addr()).await.unwrap();
    let hs = wire::Handshake {
        from: Some(wire::UniqueAddress {
            address: Some(addr("future", 1)),
            uid: 7,
        }),
        to: Some(addr("future", node.remoting_addr().port())),
        protocol_version: PROTOCOL_VERSION + 1,
        cluster_name: "future".into(),
        lane: Lane::Control.index() as u32,
        nonce: Default::default(),
    };
    write_frame(&mut conn, &hs.encode_to_vec()).await;
    let reply = wire::HandshakeReply::decode(read_frame(&mut conn).await).unwrap();
    let Some(wire::handshake_reply::Result::Rejected(reason)) = reply.result else {
        panic!("a newer protocol version is refused: {reply:?}");
    };
    assert!(
        reason.contains(&format!("protocol version {}", PROTOCOL_VERSION + 1))
            && reason.contains(&format!("speaks {PROTOCOL_VERSION}")),
        "the reason names both versions: {reason}"
    );
    assert!(!reply.quarantined);
    common::wait_for("the refusal counted", || {
        node.transport()
            .stats()
            .handshakes_refused
            .load(std::sync::atomic::Ordering::Relaxed)
            > refused_before
    })
    .await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn order_is_kept_per_sender_receiver_and_lane() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let a = start_first(fast_config("order", &[])).await;
    wait_self_up(&a).await;
    let b = Node::builder(fast_config("order", &[port_of(&a)]))
        .layer(SeqLayer {
            seen: seen.clone(),
            inbound: None,
        })
        .start()
        .await
        .unwrap();
    wait_self_up(&b).await;
    let frame = |n: u64| Frame {
        protocol: SEQ,
        manifest: common::bench_layer::PAYLOAD_MANIFEST,
        recipient_uid: b.cluster().self_unique_address().uid,
        payload: Bytes::copy_from_slice(&n.to_be_bytes()),
        trace: None,
    };
    const N: u64 = 100_000;
    // Single sends, batched sends, and sends through the general path, interleaved.
    let lane = a
        .transport()
        .outbound_lane(b.self_address(), Lane::Ordinary);
    let mut n = 0;
    while n < N {
        match n % 3 {
            0 => lane.send_wait(frame(n)).await.unwrap(),
            1 => {
                let end = (n + 100).min(N);
                lane.send_all_wait((n..end).map(frame)).await.unwrap();
                n = end;
                continue;
            }
            _ => a
                .transport()
                .send_wait(concord::remote::Outbound {
                    to: b.self_address().clone(),
                    to_uid: Some(b.cluster().self_unique_address().uid),
                    lane: Lane::Ordinary,
                    protocol: SEQ,
                    manifest: common::bench_layer::PAYLOAD_MANIFEST,
                    payload: Bytes::copy_from_slice(&n.to_be_bytes()),
                    trace: None,
                })
                .await
                .unwrap(),
        }
        n += 1;
    }
    common::wait_for("everything arrived", || {
        seen.lock().unwrap().len() as u64 == N
    })
    .await;
    let in_order = seen.lock().unwrap().iter().copied().eq(0..N);
    assert!(in_order, "in order, none lost, none twice");
    a.stop().await;
    b.stop().await;
}
