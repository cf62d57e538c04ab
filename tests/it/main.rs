//! The integration tests in one binary (`cargo test --release --test it`; one file's tests with
//! `cargo test --release --test it api_upscale::`). One binary links libtorch and compiles tests/common once,
//! where a binary per file did so 47 times, and its tests share one pool of `--test-threads`.
//!
//! Tests that change or measure something process-wide keep a binary of their own (tests/*.rs):
//! winograd_reference (flips the process-wide `cpu_winograd` switch and counts kernels made by any call),
//! colorfix_reference (`tch::set_num_threads(1)` for the whole process) and out_of_memory (its capped
//! servers must not compete for the cores with other tests; inside its binary they run one at a time).
//! Tests here must not: no `std::env::set_var`, no process-wide libtorch settings, no fixed ports or paths.

#[path = "../common/mod.rs"]
mod common;

mod api_restore;
mod api_upscale;
mod api_vae;
mod bad_input;
mod cancel_mid_push;
mod checkpoint_sweep;
mod budget;
mod busy_database;
mod cli;
mod cli_stop;
mod decode_batch_limit;
mod encoder_settings;
mod colour;
mod comfyui_nodes;
mod disk_full;
mod docs_tokens;
mod dit_memory;
mod exact_split;
mod flashvsr_jobs;
mod flashvsr_parts;
mod flashvsr_resume;
mod gguf_quants;
mod host_memory;
mod import_cycles;
mod interpolate;
mod lan_safety;
mod layers;
mod load_memory;
mod media;
mod metrics;
mod newcomer;
mod newcomer_defaults;
mod open_connections;
mod openapi;
mod output_formats;
mod parts;
mod parts_workers;
mod presets;
mod readme_as_written;
mod preview;
mod python_client;
mod python_client_flashvsr;
mod realcugan_parity;
mod realesrgan_parity;
mod remote_vae;
mod remote_vae_protocol;
mod restart;
mod restore_dit_tiles;
mod restore_reference;
mod restore_scenes;
mod resume;
mod resume_across_boxes;
mod resume_without_digests;
mod retention;
mod rife_parity;
mod seedvr2_dit_reference;
mod seedvr2_dit_weights;
mod seedvr2_reference;
mod several_workers;
mod shared_box;
mod short_ids;
mod stills;
mod flashvsr_pipeline;
mod taehv_jobs;
mod taehv_reference;
mod tiling;
mod tokens;
mod torch_file;
mod try_first;
mod upload_fairness;
mod upload_hints;
mod upscale_progress;
mod wan_reference;
mod wan_dit_reference;
mod watch_folders;
mod watch_unmovable;
mod web_page;
mod webhooks;
mod zip_limits;
