//! The wire form of addresses, shared by every protocol's codec and the handshake: the
//! `Address` and `UniqueAddress` messages of the remoting schema. Decoding never panics: a
//! missing field or a port outside 1..=65535 gives a [`DecodeError`].

use concord_core::{Address, UniqueAddress};

use super::codec::DecodeError;
use super::wire;

/// `a` as its wire message.
pub(crate) fn address_to_wire(a: &Address) -> wire::Address {
    wire::Address {
        system: a.system.clone(),
        host: a.host.clone(),
        port: u32::from(a.port),
    }
}

/// The address of a wire message.
///
/// # Errors
/// An empty system or host, or a port of 0 or above 65535.
pub(crate) fn address_from_wire(a: &wire::Address) -> Result<Address, DecodeError> {
    let port = u16::try_from(a.port)
        .ok()
        .filter(|p| *p != 0)
        .ok_or(DecodeError::BadPort(a.port))?;
    if a.system.is_empty() {
        return Err(DecodeError::MissingField("address.system"));
    }
    if a.host.is_empty() {
        return Err(DecodeError::MissingField("address.host"));
    }
    Ok(Address::new(a.system.clone(), a.host.clone(), port))
}

/// `u` as its wire message.
pub(crate) fn unique_to_wire(u: &UniqueAddress) -> wire::UniqueAddress {
    wire::UniqueAddress {
        address: Some(address_to_wire(&u.address)),
        uid: u.uid,
    }
}

/// The unique address of a wire message.
///
/// # Errors
/// A missing or bad address.
pub(crate) fn unique_from_wire(u: &wire::UniqueAddress) -> Result<UniqueAddress, DecodeError> {
    let a = u
        .address
        .as_ref()
        .ok_or(DecodeError::MissingField("unique_address.address"))?;
    Ok(UniqueAddress::new(address_from_wire(a)?, u.uid))
}
