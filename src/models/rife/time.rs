//! Which inferences reach a time t: this HDv3 model only makes the middle of two frames, and the reference's
//! inference_img.py `--ratio` reaches other times by bisection. Its defaults: stop when the middle is within
//! `rthreshold / 2` of t (rthreshold = 0.02), after at most `rmaxcycles` = 8 inferences; t within 0.01 of an
//! end gives that end's frame. So 0.5 takes one inference, 0.25 and 0.75 two (as inference_video.py's `--exp`
//! recursion makes them), 1/3 six (it gives 0.328125).

/// inference_img.py's `--rthreshold` default.
pub const RATIO_THRESHOLD: f64 = 0.02;
/// inference_img.py's `--rmaxcycles` default.
pub const MAX_CYCLES: usize = 8;

/// After an inference that did not reach t, which half of the pair holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Half {
    /// t is later than the middle: the middle becomes the pair's first frame.
    Later,
    /// t is earlier: the middle becomes the pair's second frame.
    Earlier,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Reach {
    /// t is within `RATIO_THRESHOLD / 2` of 0: the first frame itself.
    First,
    /// t is within `RATIO_THRESHOLD / 2` of 1: the second frame itself.
    Last,
    /// `halves.len() + 1` inferences; the last one's middle, at `reached`, is the frame.
    Bisect { halves: Vec<Half>, reached: f64 },
}

impl Reach {
    pub fn time(&self) -> f64 {
        match self {
            Reach::First => 0.0,
            Reach::Last => 1.0,
            Reach::Bisect { reached, .. } => *reached,
        }
    }

    pub fn inferences(&self) -> usize {
        match self {
            Reach::First | Reach::Last => 0,
            Reach::Bisect { halves, .. } => halves.len() + 1,
        }
    }
}

/// The reference's loop, on the times alone (the same f64 arithmetic, so the same stops).
pub fn reach(t: f64) -> Reach {
    let margin = RATIO_THRESHOLD / 2.0;
    if t <= margin {
        return Reach::First;
    }
    if t >= 1.0 - margin {
        return Reach::Last;
    }
    let (mut first, mut second) = (0.0f64, 1.0f64);
    let mut halves = Vec::new();
    for cycle in 0..MAX_CYCLES {
        let middle = (first + second) / 2.0;
        if (t - margin <= middle && middle <= t + margin) || cycle + 1 == MAX_CYCLES {
            return Reach::Bisect { halves, reached: middle };
        }
        if t > middle {
            first = middle;
            halves.push(Half::Later);
        } else {
            second = middle;
            halves.push(Half::Earlier);
        }
    }
    unreachable!("the last cycle returns")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halves_quarters_and_thirds() {
        assert_eq!(reach(0.5), Reach::Bisect { halves: vec![], reached: 0.5 });
        assert_eq!(reach(0.25), Reach::Bisect { halves: vec![Half::Earlier], reached: 0.25 });
        assert_eq!(reach(0.75), Reach::Bisect { halves: vec![Half::Later], reached: 0.75 });
        let third = reach(1.0 / 3.0);
        assert_eq!((third.inferences(), third.time()), (6, 0.328125));
        assert_eq!((reach(0.005), reach(0.995)), (Reach::First, Reach::Last));
        for i in 1..100 {
            let t = i as f64 / 100.0;
            let reached = reach(t);
            assert!((reached.time() - t).abs() <= RATIO_THRESHOLD / 2.0 + 1e-12, "{t}: {reached:?}");
            assert!(reached.inferences() <= MAX_CYCLES);
        }
    }
}
