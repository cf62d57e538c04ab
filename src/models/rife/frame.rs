//! The frame around the network: inference_video.py pads the bottom and right with zeros to a multiple of
//! max(32, 32 / scale) and crops the result back. The multiple is what the coarsest block needs: it works at
//! 1/(4/scale) of the frame and halves that twice more, and its flow is scaled back by the same factors.
use tch::{TchError, Tensor};

/// The side multiple at a flow `scale` (32 at 1.0 and above, 64 at 0.5, 128 at 0.25).
pub fn padding_multiple(scale: f64) -> i64 {
    // inference_video.py: `tmp = max(32, int(32 / args.scale))`.
    32.max((32.0 / scale) as i64)
}

/// `len` rounded up to a multiple of `multiple`.
pub fn padded_len(len: i64, multiple: i64) -> i64 {
    ((len - 1) / multiple + 1) * multiple
}

/// Zeros at the bottom and right up to the multiple (F.pad's default); the frame itself when it fits.
pub fn pad(frame: &Tensor, multiple: i64) -> Result<Tensor, TchError> {
    let (height, width) = (frame.size()[2], frame.size()[3]);
    let (bottom, right) = (padded_len(height, multiple) - height, padded_len(width, multiple) - width);
    if bottom == 0 && right == 0 {
        return Ok(frame.shallow_clone());
    }
    frame.f_constant_pad_nd([0, right, 0, bottom])
}

/// The top-left `height`×`width`, contiguous.
pub fn crop(frame: &Tensor, height: i64, width: i64) -> Result<Tensor, TchError> {
    frame.f_narrow(2, 0, height)?.f_narrow(3, 0, width)?.f_contiguous()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multiples_follow_inference_video() {
        let multiples: Vec<i64> = [0.25, 0.5, 1.0, 2.0, 4.0].iter().map(|&s| padding_multiple(s)).collect();
        assert_eq!(multiples, [128, 64, 32, 32, 32]);
        assert_eq!((padded_len(70, 32), padded_len(96, 32), padded_len(100, 32), padded_len(720, 64)), (96, 96, 128, 768));
    }
}
