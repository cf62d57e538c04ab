//! The configuration's reading: defaults, environment overrides, typed values.
use super::*;

#[test]
fn shipped_config_file_states_the_defaults() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/config.toml")).unwrap();
    let file: Config = toml::from_str(&text).unwrap();
    assert_eq!(file, Config::default());
}

#[test]
fn env_overrides_are_typed_by_the_default() {
    let mut table = toml::Table::try_from(Config::default()).unwrap();
    let vars = [("VAEBOX_MAX_WIDTH".to_string(), "640".to_string()), ("VAEBOX_LISTEN".into(), "0.0.0.0:9".into())];
    apply_env_overrides(&mut table, vars.into_iter()).unwrap();
    let config: Config = toml::Value::Table(table).try_into().unwrap();
    assert_eq!(config.max_width, 640);
    assert_eq!(config.listen.to_string(), "0.0.0.0:9");
}

#[test]
fn bad_env_values_and_unknown_keys_are_refused() {
    let mut table = toml::Table::try_from(Config::default()).unwrap();
    let bad_number = [("VAEBOX_MAX_WIDTH".to_string(), "wide".to_string())];
    assert!(apply_env_overrides(&mut table, bad_number.into_iter()).is_err());
    let unknown = [("VAEBOX_NO_SUCH_KEY".to_string(), "1".to_string())];
    assert!(apply_env_overrides(&mut table, unknown.into_iter()).is_err());
}

#[test]
fn invalid_values_name_their_key() {
    let config = Config { chunk_frames: 0, ..Config::default() };
    let err = config.validate().unwrap_err().to_string();
    assert!(err.contains("chunk_frames"), "{err}");
    let config = Config { cpu_frame_workers: 1000, ..Config::default() };
    let err = config.validate().unwrap_err().to_string();
    assert!(err.contains("cpu_frame_workers"), "{err}");
    for (key, value) in [("listen", "nowhere"), ("device", "tpu"), ("dtype", "f64"), ("cpu_allocator", "greedy")] {
        let mut table = toml::Table::try_from(Config::default()).unwrap();
        table.insert(key.into(), toml::Value::String(value.into()));
        let err = toml::Value::Table(table).try_into::<Config>().unwrap_err().to_string();
        assert!(err.contains(&format!("`{value}`: {key}: expected ")), "{err}");
    }
}

#[test]
fn typed_values_read_as_written() {
    let mut table = toml::Table::try_from(Config::default()).unwrap();
    for (key, value) in [("listen", "0.0.0.0:9000"), ("device", "cuda:1"), ("dtype", "bfloat16"), ("cpu_allocator", "fast")] {
        table.insert(key.into(), toml::Value::String(value.into()));
    }
    let config: Config = toml::Value::Table(table).try_into().unwrap();
    assert_eq!(config.listen.to_string(), "0.0.0.0:9000");
    assert_eq!((config.device, config.dtype, config.cpu_allocator), (DeviceChoice::Cuda(1), DtypeChoice::Bf16, HostAllocator::Fast));
    let written = toml::Table::try_from(&config).unwrap();
    assert_eq!((written["device"].as_str(), written["dtype"].as_str()), (Some("cuda:1"), Some("bf16")));
}

#[test]
fn media_priority_reads_normal_or_idle() {
    let read = |value: &str| {
        let mut table = toml::Table::try_from(Config::default()).unwrap();
        table.insert("media_priority".into(), toml::Value::String(value.into()));
        toml::Value::Table(table).try_into::<Config>().map(|c| c.media_priority)
    };
    assert_eq!(Config::default().media_priority, ProcessPriority::Normal);
    assert_eq!(read("idle").unwrap(), ProcessPriority::Idle);
    assert_eq!(read("normal").unwrap(), ProcessPriority::Normal);
    assert!(read("urgent").is_err());
}
