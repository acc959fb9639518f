//! Compiles `proto/lachesis/v1/*.proto` with a vendored `protoc` (no system package needed) and
//! writes the file descriptor set that gRPC reflection serves. The messages also derive serde,
//! so snapshots read from JSON files and decision-log lines are the very same types.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    tonic_prost_build::configure()
        .type_attribute(
            ".lachesis.v1",
            "#[derive(serde::Serialize, serde::Deserialize)]",
        )
        .type_attribute(".lachesis.v1", "#[serde(default, deny_unknown_fields)]")
        // Absent unless set, so decision-log lines and `decide` output stay as they were.
        .field_attribute(
            ".lachesis.v1.DecideResponse.rerouted",
            "#[serde(skip_serializing_if = \"String::is_empty\")]",
        )
        .file_descriptor_set_path(out.join("lachesis_v1_descriptor.bin"))
        .compile_with_config(config, &["proto/lachesis/v1/scheduler.proto"], &["proto"])?;
    println!("cargo:rerun-if-changed=proto");
    Ok(())
}
