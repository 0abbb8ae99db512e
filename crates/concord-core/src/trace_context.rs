//! [`TraceContext`]: the W3C trace context (Trace Context level 1) a message carries
//! between nodes when it is traced — what the remoting envelope's optional `trace` field
//! holds (the runtime's `host::trace` and `telemetry` use it; the protocols never do).

/// A W3C trace context (Trace Context level 1, `traceparent`): the trace, the sending
/// span and the flags (bit 0: sampled). On the wire: 25 bytes — trace id (16), span id (8),
/// flags (1) — in the envelope's field 5.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TraceContext {
    /// The trace id (never all zero).
    pub trace_id: [u8; 16],
    /// The parent span id (never all zero).
    pub span_id: [u8; 8],
    /// Trace flags; bit 0: sampled.
    pub flags: u8,
}

impl TraceContext {
    /// Bytes of a context on the wire.
    pub const WIRE_BYTES: usize = 25;

    /// The wire form.
    pub fn to_bytes(&self) -> [u8; Self::WIRE_BYTES] {
        let mut b = [0u8; Self::WIRE_BYTES];
        b[..16].copy_from_slice(&self.trace_id);
        b[16..24].copy_from_slice(&self.span_id);
        b[24] = self.flags;
        b
    }

    /// From the wire form; `None` for another length or an all-zero id (invalid in W3C's
    /// rules: such a context is ignored, never an error).
    pub fn from_bytes(b: &[u8]) -> Option<TraceContext> {
        let b: &[u8; Self::WIRE_BYTES] = b.try_into().ok()?;
        let mut trace_id = [0u8; 16];
        let mut span_id = [0u8; 8];
        trace_id.copy_from_slice(&b[..16]);
        span_id.copy_from_slice(&b[16..24]);
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(TraceContext {
            trace_id,
            span_id,
            flags: b[24],
        })
    }

    /// True if the trace is sampled (flags bit 0).
    pub fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }

    /// The `traceparent` header value: `00-<trace id>-<span id>-<flags>`, lowercase hex.
    pub fn traceparent(&self) -> String {
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        format!(
            "00-{}-{}-{:02x}",
            hex(&self.trace_id),
            hex(&self.span_id),
            self.flags
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wire_form_round_trips_and_invalid_ids_are_ignored() {
        let t = TraceContext {
            trace_id: [0xab; 16],
            span_id: [0x01; 8],
            flags: 1,
        };
        assert_eq!(TraceContext::from_bytes(&t.to_bytes()), Some(t));
        assert!(t.sampled());
        assert_eq!(
            t.traceparent(),
            format!("00-{}-{}-01", "ab".repeat(16), "01".repeat(8))
        );
        assert_eq!(TraceContext::from_bytes(&t.to_bytes()[..24]), None);
        let mut zero = t.to_bytes();
        zero[..16].fill(0);
        assert_eq!(TraceContext::from_bytes(&zero), None);
        let mut zero = t.to_bytes();
        zero[16..24].fill(0);
        assert_eq!(TraceContext::from_bytes(&zero), None);
    }
}
