//! Compiles each layer's protobuf schema with protox (pure Rust, no `protoc` binary needed):
//! `src/remote/remote.proto` (handshake, envelope, addresses) and one file per protocol in
//! its layer's folder. All are package `concord.v1`, generated into one Rust module
//! (`remote::wire`).

const SCHEMAS: [&str; 7] = [
    "src/remote/remote.proto",
    "src/cluster/cluster.proto",
    "src/singleton/singleton.proto",
    "src/ddata/ddata.proto",
    "src/sharding/sharding.proto",
    "src/kv/kv.proto",
    "src/persistence/replicated/journal.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    for s in SCHEMAS {
        println!("cargo:rerun-if-changed={s}");
    }
    let includes: Vec<&str> = SCHEMAS
        .iter()
        .map(|s| s.rsplit_once('/').map_or(".", |(dir, _)| dir))
        .collect();
    let fds = protox::compile(SCHEMAS, includes)?;
    prost_build::Config::new()
        // Payloads stay `Bytes`: an envelope's payload is a slice of the frame, not a copy.
        .bytes(["."])
        .compile_fds(fds)?;
    Ok(())
}
