//! [`JournalMessage::GiveUp`] to and from `JournalGiveUp` (manifest
//! [`super::manifest::GIVE_UP`]): the addresses as text, at most
//! [`MAX_GIVE_UP`], each well-formed.

use concord_core::address::Address;
use concord_core::persistence::journal::give_up::MAX_GIVE_UP;
use concord_core::persistence::journal::JournalMessage;
use prost::Message;

use crate::remote::wire;
use crate::remote::DecodeError;

pub(super) fn encode(lost: &[Address]) -> Vec<u8> {
    wire::JournalGiveUp {
        lost: lost.iter().map(|a| a.to_string()).collect(),
    }
    .encode_to_vec()
}

pub(super) fn decode(payload: &[u8]) -> Result<JournalMessage, DecodeError> {
    let m = wire::JournalGiveUp::decode(payload).map_err(super::invalid)?;
    if m.lost.len() > MAX_GIVE_UP {
        return Err(DecodeError::Invalid(format!(
            "{} addresses given up",
            m.lost.len()
        )));
    }
    let lost = m
        .lost
        .iter()
        .map(|a| {
            a.parse::<Address>()
                .map_err(|e| DecodeError::Invalid(format!("address given up {a:?}: {e}")))
        })
        .collect::<Result<_, _>>()?;
    Ok(JournalMessage::GiveUp { lost })
}
