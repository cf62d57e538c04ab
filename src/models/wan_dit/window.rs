//! FlashVSR's 3-D attention windows (`WindowPartition3D`): `(2, 8, 8)` tokens = 128, one block of the
//! block-sparse kernel. Windows are ordered `(f/2, h/8, w/8)` row-major and the tokens inside a window
//! `(2, 8, 8)` row-major. A "segment" is one window row in time (2 latent frames): `n_sp = h/8 · w/8`
//! windows.
use tch::{TchError, Tensor};

/// `(frames, rows, columns)` of tokens in one window.
pub const WINDOW: [i64; 3] = [2, 8, 8];
/// Tokens per window, which is also the kernel's block size.
pub const WINDOW_TOKENS: i64 = WINDOW[0] * WINDOW[1] * WINDOW[2];

/// The window grid of one step's tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowGrid {
    /// Token grid `(f, h, w)`, each a multiple of the window.
    pub tokens: [i64; 3],
}

impl WindowGrid {
    /// `None` unless every side is a whole number of windows.
    pub fn of(tokens: [i64; 3]) -> Option<Self> {
        let fits = tokens.iter().zip(WINDOW).all(|(&n, size)| n > 0 && n % size == 0);
        fits.then_some(Self { tokens })
    }

    /// Window rows and columns of one segment.
    pub fn spatial(&self) -> [i64; 2] {
        [self.tokens[1] / WINDOW[1], self.tokens[2] / WINDOW[2]]
    }

    /// Windows per segment (`n_sp`).
    pub fn per_segment(&self) -> i64 {
        let [rows, columns] = self.spatial();
        rows * columns
    }

    pub fn segments(&self) -> i64 {
        self.tokens[0] / WINDOW[0]
    }

    pub fn windows(&self) -> i64 {
        self.segments() * self.per_segment()
    }

    /// `[1, f·h·w, D]` in `(f, h, w)` order → `[windows, 128, D]`.
    pub fn partition(&self, x: &Tensor) -> Result<Tensor, TchError> {
        let [f, h, w] = self.tokens;
        let [wf, wh, ww] = WINDOW;
        let d = *x.size().last().unwrap_or(&0);
        x.f_view([f / wf, wf, h / wh, wh, w / ww, ww, d].as_slice())?.f_permute([0, 2, 4, 1, 3, 5, 6])?.f_reshape([self.windows(), WINDOW_TOKENS, d])
    }

    /// The inverse: `[windows, 128, D]` → `[1, f·h·w, D]`.
    pub fn reverse(&self, x: &Tensor) -> Result<Tensor, TchError> {
        let [f, h, w] = self.tokens;
        let [wf, wh, ww] = WINDOW;
        let d = *x.size().last().unwrap_or(&0);
        x.f_view([f / wf, h / wh, w / ww, wf, wh, ww, d].as_slice())?.f_permute([0, 3, 1, 4, 2, 5, 6])?.f_reshape([1, f * h * w, d])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind};

    #[test]
    fn partition_orders_windows_then_tokens_row_major_and_reverses() {
        let grid = WindowGrid::of([4, 16, 8]).unwrap();
        let x = Tensor::arange(4 * 16 * 8, (Kind::Float, Device::Cpu)).view([1, -1, 1]);
        let windows = grid.partition(&x).unwrap();
        assert_eq!(windows.size(), [4, 128, 1]);
        // Window 1 is the second window row (h 8..16) of frames 0..2; its token 1 is (f 0, h 8, w 1).
        assert_eq!(windows.int64_value(&[1, 1, 0]), 8 * 8 + 1);
        // Token 64 of a window starts its second frame.
        assert_eq!(windows.int64_value(&[2, 64, 0]), (3 * 16) * 8);
        assert!(grid.reverse(&windows).unwrap().equal(&x));
        assert_eq!((grid.per_segment(), grid.segments()), (2, 2));
        assert!(WindowGrid::of([2, 12, 8]).is_none());
    }
}
