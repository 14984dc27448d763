//! Generates the gRPC code of `proto/blox.proto` with a vendored `protoc`, so
//! no system install is needed.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    std::env::set_var("PROTOC", protoc);
    println!("cargo:rerun-if-changed=proto/blox.proto");
    // Decode errors are the sender's: INVALID_ARGUMENT (src/codec.rs).
    tonic_prost_build::configure()
        .codec_path("crate::codec::StrictCodec")
        .compile_protos(&["proto/blox.proto"], &["proto"])?;
    Ok(())
}
