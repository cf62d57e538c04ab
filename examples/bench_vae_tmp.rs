//! Temporary driver for `vaebox::bench::vae::run` until `vaebox bench vae` is wired in main.rs.
use clap::Parser;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: vaebox::bench::vae::VaeBenchArgs,
}

fn main() -> anyhow::Result<()> {
    vaebox::bench::vae::run(&Cli::parse().args)
}
