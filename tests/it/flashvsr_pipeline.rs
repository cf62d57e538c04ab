//! The FlashVSR pipeline around its models against the original's run (../shared/reference/flashvsr): the
//! input preparation first (Pillow's bicubic ×4 on 8-bit frames, then the centre crop to 128-multiples).
use crate::common;

use common::tensors::read_tensor_map;
use tch::{Kind, Tensor};
use vaebox::models::flashvsr::resize::resize_rgb8;

const REFERENCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/reference/flashvsr");

#[test]
fn frames_are_upscaled_byte_for_byte_as_pillow_does() {
    let case = read_tensor_map(&std::path::Path::new(REFERENCE).join("e2e_tiny.safetensors"));
    let (lr, lq) = (&case["lr_u8_thwc"], &case["lq_u8_thwc"]);
    let [frames, height, width, _] = lr.size()[..] else { panic!("{:?}", lr.size()) };
    let [_, crop_h, crop_w, _] = lq.size()[..] else { panic!("{:?}", lq.size()) };
    let (out_h, out_w) = (4 * height, 4 * width);
    // The original's centre crop of the upscaled frame to 128-multiples: left (sW − tW) // 2, top (sH − tH) // 2.
    let (top, left) = ((out_h - crop_h) / 2, (out_w - crop_w) / 2);
    let mut differing = 0;
    for t in 0..frames {
        let frame = Vec::<u8>::try_from(lr.get(t).flatten(0, -1)).unwrap();
        let upscaled = resize_rgb8(&frame, height as usize, width as usize, out_h as usize, out_w as usize);
        let ours = Tensor::from_slice(&upscaled).view([out_h, out_w, 3]).narrow(0, top, crop_h).narrow(1, left, crop_w);
        differing += ours.ne_tensor(&lq.get(t)).to_kind(Kind::Int64).sum(Kind::Int64).int64_value(&[]);
    }
    println!("Pillow bicubic ×4 of {frames} frames of {height}×{width}: {differing} bytes differ from the original's");
    assert_eq!(differing, 0, "the upscaled frames differ from Pillow's in {differing} bytes");
}
