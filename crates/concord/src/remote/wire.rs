//! Protobuf types generated from the layers' schemas (`remote/remote.proto` and one `.proto`
//! per protocol in its layer's folder), all of package `concord.v1`.
#![allow(missing_docs, clippy::all, clippy::pedantic)]

include!(concat!(env!("OUT_DIR"), "/concord.v1.rs"));
