//! Which input frames each output frame of an interpolation comes from. Exact integer arithmetic on the
//! two frame rates: output frame j shows the input's time j / out_rate, that is input position
//! p = j · in_rate / out_rate; at a whole p it is that input frame, else the frame between ⌊p⌋ and ⌊p⌋ + 1
//! at t = p − ⌊p⌋. The output ends where the input does (⌈n · out_rate / in_rate⌉ frames, the last input
//! frame held), so the duration and the audio beside it stay as they were.

/// A frame rate `num/den` frames per second, both positive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameRate {
    pub num: u64,
    pub den: u64,
}

impl FrameRate {
    /// `60`, `59.94` or `60000/1001`; `None` for anything else, zero or absurd (over 1000 fps).
    pub fn parse(text: &str) -> Option<FrameRate> {
        let text = text.trim();
        let rate = match text.split_once('/') {
            Some((num, den)) => FrameRate { num: num.trim().parse().ok()?, den: den.trim().parse().ok()? },
            None => match text.split_once('.') {
                Some((whole, fraction)) if !fraction.is_empty() && fraction.len() <= 6 && fraction.bytes().all(|b| b.is_ascii_digit()) => {
                    let den = 10u64.pow(fraction.len() as u32);
                    let whole: u64 = if whole.is_empty() { 0 } else { whole.parse().ok()? };
                    FrameRate { num: whole.checked_mul(den)?.checked_add(fraction.parse().ok()?)?, den }
                }
                Some(_) => return None,
                None => FrameRate { num: text.parse().ok()?, den: 1 },
            },
        };
        (rate.num > 0 && rate.den > 0 && rate.num <= 1000 * rate.den).then(|| rate.reduced())
    }

    pub fn reduced(self) -> FrameRate {
        let divisor = gcd(self.num, self.den);
        FrameRate { num: self.num / divisor, den: self.den / divisor }
    }

    pub fn times(self, factor: u64) -> FrameRate {
        FrameRate { num: self.num * factor, den: self.den }.reduced()
    }

    pub fn as_f64(self) -> f64 {
        self.num as f64 / self.den as f64
    }

    /// `N/D`, as ffmpeg takes it.
    pub fn as_text(self) -> String {
        format!("{}/{}", self.num, self.den)
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.max(1)
}

/// Where an output frame comes from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Source {
    /// Input frame `index` itself (at its own time, or held at the end).
    Input(u64),
    /// Between input frames `first` and `first + 1`, at `t` in (0, 1).
    Between { first: u64, t: f64 },
}

/// An input of `input_frames` at `input` re-timed to `output`.
#[derive(Debug, Clone, Copy)]
pub struct Retiming {
    input_frames: u64,
    /// Input position of output frame j is j · step_num / step_den (in_rate / out_rate).
    step_num: u128,
    step_den: u128,
}

impl Retiming {
    pub fn new(input: FrameRate, output: FrameRate, input_frames: u64) -> Retiming {
        Retiming {
            input_frames,
            step_num: u128::from(input.num) * u128::from(output.den),
            step_den: u128::from(input.den) * u128::from(output.num),
        }
    }

    pub fn output_frames(&self) -> u64 {
        let frames = u128::from(self.input_frames) * self.step_den;
        frames.div_ceil(self.step_num).min(u128::from(u64::MAX)) as u64
    }

    pub fn source(&self, output_index: u64) -> Source {
        let position = u128::from(output_index) * self.step_num;
        let (first, rest) = ((position / self.step_den) as u64, position % self.step_den);
        let last = self.input_frames.saturating_sub(1);
        if first >= last {
            return Source::Input(last);
        }
        if rest == 0 {
            return Source::Input(first);
        }
        Source::Between { first, t: rest as f64 / self.step_den as f64 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(text: &str) -> FrameRate {
        FrameRate::parse(text).unwrap()
    }

    #[test]
    fn rates_are_read_as_people_write_them() {
        assert_eq!(rate("60"), FrameRate { num: 60, den: 1 });
        assert_eq!(rate("59.94"), FrameRate { num: 2997, den: 50 });
        assert_eq!(rate("60000/1001"), FrameRate { num: 60000, den: 1001 });
        assert_eq!(rate(" 48/2 "), FrameRate { num: 24, den: 1 });
        for bad in ["0", "-5", "1/0", "abc", "60fps", "2000", "1.", "1.2.3", ""] {
            assert_eq!(FrameRate::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_factor_puts_frames_between_each_pair_and_holds_the_last() {
        let retiming = Retiming::new(rate("30000/1001"), rate("30000/1001").times(2), 3);
        assert_eq!(retiming.output_frames(), 6);
        let sources: Vec<Source> = (0..6).map(|j| retiming.source(j)).collect();
        assert_eq!(
            sources,
            [
                Source::Input(0),
                Source::Between { first: 0, t: 0.5 },
                Source::Input(1),
                Source::Between { first: 1, t: 0.5 },
                Source::Input(2),
                Source::Input(2)
            ]
        );
        let thirds = Retiming::new(rate("24"), rate("72"), 2);
        assert_eq!(thirds.source(1), Source::Between { first: 0, t: 1.0 / 3.0 });
        assert_eq!(thirds.source(2), Source::Between { first: 0, t: 2.0 / 3.0 });
    }

    #[test]
    fn a_target_rate_keeps_the_duration() {
        // 24 → 60: 2.5 output frames per input frame; 10 input frames last 10/24 s, 25 output frames 25/60 s.
        let retiming = Retiming::new(rate("24"), rate("60"), 10);
        assert_eq!(retiming.output_frames(), 25);
        assert_eq!(retiming.source(1), Source::Between { first: 0, t: 0.4 });
        assert_eq!(retiming.source(5), Source::Input(2));
        // 30000/1001 → 60: not a whole factor; positions stay exact over a long clip.
        let ntsc = Retiming::new(rate("30000/1001"), rate("60"), 100_000);
        assert_eq!(ntsc.output_frames(), 200_200);
        assert_eq!(ntsc.source(2002), Source::Input(1000));
    }
}
