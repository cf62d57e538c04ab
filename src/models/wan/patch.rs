//! Wan 2.2's 2×2 patchify around the network: pixel channel `c` at offset (h_off, w_off) becomes
//! channel `c·p² + w_off·p + h_off` (diffusers `patchify` / `unpatchify`).
use tch::Tensor;

use crate::models::ModelError;

pub fn patchify(x: &Tensor, p: i64) -> Result<Tensor, ModelError> {
    if p == 1 {
        return Ok(x.shallow_clone());
    }
    let (b, c, f, h, w) = x.size5()?;
    Ok(x.f_reshape([b, c, f, h / p, p, w / p, p])?.f_permute([0, 1, 6, 4, 2, 3, 5])?.f_reshape([b, c * p * p, f, h / p, w / p])?)
}

pub fn unpatchify(x: &Tensor, p: i64) -> Result<Tensor, ModelError> {
    if p == 1 {
        return Ok(x.shallow_clone());
    }
    let (b, cp, f, h, w) = x.size5()?;
    Ok(x.f_reshape([b, cp / (p * p), p, p, f, h, w])?.f_permute([0, 1, 4, 5, 3, 6, 2])?.f_reshape([b, cp / (p * p), f, h * p, w * p])?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind};

    #[test]
    fn channel_order_and_round_trip() {
        let x = Tensor::arange(2 * 3 * 4 * 6, (Kind::Float, Device::Cpu)).reshape([1, 2, 3, 4, 6]);
        let patched = patchify(&x, 2).unwrap();
        assert_eq!(patched.size(), [1, 8, 3, 2, 3]);
        // channel c·4 + w_off·2 + h_off at patch (0,0) of frame 0 is pixel (h_off, w_off) of channel c.
        let value = |t: &Tensor, idx: &[i64]| t.double_value(idx);
        assert_eq!(value(&patched, &[0, 4 + 2 + 1, 0, 0, 0]), value(&x, &[0, 1, 0, 1, 1]));
        assert_eq!(value(&patched, &[0, 2, 0, 0, 0]), value(&x, &[0, 0, 0, 0, 1]));
        assert!(unpatchify(&patched, 2).unwrap().equal(&x));
    }
}
