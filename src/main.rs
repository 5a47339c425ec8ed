//! The operator binary: `run` (the controller), `crd` (print the CRD YAML),
//! `version`. Errors are reported with `anyhow` here, at the binary's edge only.
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "tfjob-operator",
    version,
    about = "Runs Kubeflow-compatible TFJobs"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the TFJob CustomResourceDefinition as YAML (`kubectl apply -f -`).
    Crd,
    /// Print the version.
    Version,
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Crd => print!("{}", tfjob_operator::api::crd::crd_yaml()?),
        Command::Version => println!("tfjob-operator {}", env!("CARGO_PKG_VERSION")),
    }
    Ok(())
}
