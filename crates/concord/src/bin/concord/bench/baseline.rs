//! The physical baseline of the messaging benchmarks: raw tokio TCP on loopback, no
//! Concord code. One writer frames the payloads (4-byte length prefix) into 64 KiB
//! batches and writes them; one reader parses and counts the frames.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::flow::{Flow, Gate};

/// Bytes per write of the baseline's writer.
const WRITE_BATCH_BYTES: usize = 64 * 1024;

/// Starts the baseline connection with its writer held at a closed gate; the returned flow
/// measures it (messages received per second).
pub async fn baseline_flow(payload: &Bytes) -> anyhow::Result<Flow> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let received = Arc::new(AtomicU64::new(0));
    let r = received.clone();
    let reader = tokio::spawn(async move {
        let Ok((mut stream, _)) = listener.accept().await else {
            return;
        };
        let mut buf = BytesMut::with_capacity(256 * 1024);
        loop {
            match stream.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            let mut frames = 0;
            while buf.len() >= 4 {
                let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
                if buf.len() < 4 + len {
                    break;
                }
                buf.advance(4 + len);
                frames += 1;
            }
            r.fetch_add(frames, Ordering::Relaxed);
        }
    });
    let connected = async {
        let stream = tokio::net::TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        anyhow::Ok(stream)
    };
    let mut stream = match connected.await {
        Ok(s) => s,
        Err(e) => {
            reader.abort();
            return Err(e);
        }
    };
    let gate = Gate::default();
    let g = gate.clone();
    let payload = payload.clone();
    tokio::spawn(async move {
        let mut buf = BytesMut::with_capacity(WRITE_BATCH_BYTES + 1024);
        while g.wait_open().await {
            buf.clear();
            while buf.len() < WRITE_BATCH_BYTES {
                buf.put_u32(payload.len() as u32);
                buf.put_slice(&payload);
            }
            if stream.write_all(&buf).await.is_err() {
                return;
            }
        }
        // Dropping the stream ends the reader.
    });
    Ok(Flow::new(gate, move || received.load(Ordering::Relaxed)))
}

/// Messages/s of `payload` one way over raw tokio TCP: `warm_up`, then `duration` counted.
pub async fn baseline_run(
    payload: &Bytes,
    warm_up: Duration,
    duration: Duration,
) -> anyhow::Result<f64> {
    let flow = baseline_flow(payload).await?;
    let w = flow.measure(warm_up, duration).await;
    flow.stop();
    Ok(w.rate())
}
