//! The precisions the benches compare, by the names their flags take.
use tch::Kind;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BenchDtype {
    F32,
    Bf16,
}

impl BenchDtype {
    pub fn parse(name: &str) -> Option<BenchDtype> {
        match name {
            "f32" => Some(BenchDtype::F32),
            "bf16" => Some(BenchDtype::Bf16),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            BenchDtype::F32 => "f32",
            BenchDtype::Bf16 => "bf16",
        }
    }

    pub fn kind(self) -> Kind {
        match self {
            BenchDtype::F32 => Kind::Float,
            BenchDtype::Bf16 => Kind::BFloat16,
        }
    }
}
