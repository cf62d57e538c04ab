//! Temporary A/B timing of Wan tunings, alternating variants to share the machine's load.
use std::time::Instant;
use tch::{Kind, Tensor};
use vaebox::models::wan::{WanLoadOptions, WanTuning, WanVae};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let kind = if args.get(1).map(String::as_str) == Some("bf16") { Kind::BFloat16 } else { Kind::Float };
    let op = args.get(2).cloned().unwrap_or("decode".into());
    let rounds: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(3);
    let variants: Vec<&str> = args.get(4).map(|s| s.split(',').collect()).unwrap_or(vec!["cl", "nocl"]);
    tch::set_num_threads(2);
    if std::env::var_os("PROFILE").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("vaebox=trace"))
            .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
            .with_writer(std::io::stderr)
            .init();
    }
    let _g = tch::no_grad_guard();
    let inputs: std::collections::HashMap<String, Tensor> = Tensor::read_safetensors(".cache/bench/wan2.1/input-seed0-9x128x128.safetensors")?.into_iter().collect();
    let opts = WanLoadOptions { kind, ..Default::default() };
    let path = std::path::Path::new(".cache/bench/wan2.1/weights-seed0.safetensors");
    let mut models = Vec::new();
    for v in &variants {
        let tuning = WanTuning { channels_last: v.contains("cl") && !v.contains("nocl") };
        models.push((v.to_string(), WanVae::load_tuned(path, &opts, &tuning)?));
    }
    let run = |vae: &WanVae, old_norm: bool, whole: bool| -> anyhow::Result<(f64, Tensor)> {
        if old_norm { std::env::set_var("WAN_OLD_NORM", "1") } else { std::env::remove_var("WAN_OLD_NORM") }
        let t = Instant::now();
        let out = if op == "encode" { vae.encode(&inputs["video"].to_kind(kind))? } else if whole { vae.decoder_stream().push(&inputs["latent"].to_kind(kind))? } else { vae.decode(&inputs["latent"].to_kind(kind))? };
        Ok((t.elapsed().as_secs_f64(), out))
    };
    let mut times = vec![Vec::new(); models.len()];
    let mut outs = Vec::new();
    for round in 0..=rounds {
        for (i, (name, vae)) in models.iter().enumerate() {
            let (s, out) = run(vae, name.contains("old"), name.contains("whole"))?;
            if round > 0 { times[i].push(s); } else { outs.push(out); }
            eprintln!("round {round} {name}: {s:.3}");
        }
    }
    for (i, (name, _)) in models.iter().enumerate() {
        let mut t = times[i].clone(); t.sort_by(f64::total_cmp);
        let d = (outs[i].to_kind(Kind::Double) - outs[0].to_kind(Kind::Double)).abs().max().double_value(&[]);
        println!("{name}: min {:.3} median {:.3}  diff vs first {d:.2e}", t[0], t[t.len() / 2]);
    }
    Ok(())
}
