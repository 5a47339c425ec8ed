//! Placeholder so the manifest is valid; see Cargo.toml. Never built.
