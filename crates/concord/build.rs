//! Compiles `proto/concord.proto` with protox (pure Rust, no `protoc` binary needed).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/concord.proto");
    let fds = protox::compile(["proto/concord.proto"], ["proto"])?;
    prost_build::Config::new()
        // Payloads stay `Bytes`: an envelope's payload is a slice of the frame, not a copy.
        .bytes(["."])
        .compile_fds(fds)?;
    Ok(())
}
