//! Where the blocks' weights live between calls. Resident on the device, or, when the weights and a
//! batch's activations do not fit the device together, on the host: each block is then built on the
//! device for its own forward and dropped after it, so the device holds one block's weights at a time
//! (the original's and the ComfyUI node's "block swap"). Built from the same [`Weights`] lookups as the
//! resident blocks, so both run the same code on the same values.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tch::{Device, Kind, Tensor};

use super::block::Block;
use super::config::DitConfig;
use crate::models::nn::weights::{tensor_bytes, Weights};
use crate::models::ModelError;

/// How a DiT keeps its blocks; chosen at load.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum BlockPlacement {
    #[default]
    Resident,
    /// On the host; each block goes to the device for its own forward.
    Swapped,
}

impl BlockPlacement {
    pub fn as_str(self) -> &'static str {
        match self {
            BlockPlacement::Resident => "resident",
            BlockPlacement::Swapped => "swapped",
        }
    }
}

pub enum Blocks {
    Resident(Vec<Block>),
    Swapped(SwappedBlocks),
}

/// Each block's tensors on the host, already at the compute dtype (fp8 kept), under their file names.
pub struct SwappedBlocks {
    source: PathBuf,
    host: Vec<BTreeMap<String, Tensor>>,
    qkv_cast: Option<Kind>,
}

impl Blocks {
    pub fn build(weights: &Weights, config: &DitConfig, placement: BlockPlacement, qkv_cast: Option<Kind>) -> Result<Blocks, ModelError> {
        let root = weights.root();
        match placement {
            BlockPlacement::Resident => {
                let blocks = (0..config.num_blocks).map(|i| Block::new(&root.pp("blocks").pp(i), config, i, qkv_cast)).collect::<Result<_, _>>()?;
                Ok(Blocks::Resident(blocks))
            }
            BlockPlacement::Swapped => {
                let mut host = Vec::new();
                for i in 0..config.num_blocks {
                    let tensors = weights.take_host(&format!("blocks.{i}."))?;
                    // Built once on the host to check every key and shape now rather than mid-job.
                    let check = Weights::new(weights.source(), shallow(&tensors), Device::Cpu, weights.kind());
                    Block::new(&check.root().pp("blocks").pp(i), config, i, qkv_cast)?;
                    check.ensure_all_used()?;
                    host.push(tensors);
                }
                Ok(Blocks::Swapped(SwappedBlocks { source: weights.source().to_path_buf(), host, qkv_cast }))
            }
        }
    }

    pub fn placement(&self) -> BlockPlacement {
        match self {
            Blocks::Resident(_) => BlockPlacement::Resident,
            Blocks::Swapped(_) => BlockPlacement::Swapped,
        }
    }

    /// Bytes of the largest block held on the host (0 when resident).
    pub fn largest_swapped_bytes(&self) -> u64 {
        match self {
            Blocks::Resident(_) => 0,
            Blocks::Swapped(swapped) => swapped.host.iter().map(|t| bytes(t.values())).max().unwrap_or(0),
        }
    }

    pub fn host_bytes(&self) -> u64 {
        match self {
            Blocks::Resident(_) => 0,
            Blocks::Swapped(swapped) => swapped.host.iter().map(|t| bytes(t.values())).sum(),
        }
    }
}

impl SwappedBlocks {
    /// Block `index` on `device`; its weights leave the device when it is dropped.
    pub fn on_device(&self, index: i64, config: &DitConfig, device: Device, kind: Kind) -> Result<Block, ModelError> {
        let tensors = shallow(&self.host[index as usize]);
        let weights = Weights::new(Path::new(&self.source), tensors, device, kind);
        Block::new(&weights.root().pp("blocks").pp(index), config, index, self.qkv_cast)
    }
}

fn shallow(tensors: &BTreeMap<String, Tensor>) -> BTreeMap<String, Tensor> {
    tensors.iter().map(|(k, t)| (k.clone(), t.shallow_clone())).collect()
}

fn bytes<'a>(tensors: impl Iterator<Item = &'a Tensor>) -> u64 {
    tensors.map(tensor_bytes).sum()
}
