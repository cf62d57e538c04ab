//! Small figures over measurements that several layers take (a benchmark's rounds, the box's finished jobs).

/// The middle value (the mean of the two middle ones for an even count); NaN for none.
pub fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

/// Seconds as the page writes them (`fmtDuration` in static/js/format.js, mirrored exactly): `42s`, `3m 07s`,
/// `2h 17m`; a dash for no number or a negative one.
pub fn duration_words(seconds: f64) -> String {
    if !seconds.is_finite() || seconds < 0.0 {
        return "–".into();
    }
    // JavaScript's Math.round: halves go up, as `round` does for the non-negative numbers left here.
    let s = seconds.round() as u64;
    match s {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m {:02}s", s / 60, s % 60),
        s => format!("{}h {:02}m", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::duration_words;

    /// The same words as the page's `fmtDuration` for the same numbers (its cases worked by hand from format.js).
    #[test]
    fn durations_read_as_the_page_writes_them() {
        let cases = [
            (0.0, "0s"), (0.4, "0s"), (0.5, "1s"), (13.2, "13s"), (59.4, "59s"), (59.5, "1m 00s"), (187.0, "3m 07s"),
            (3599.4, "59m 59s"), (3599.5, "1h 00m"), (8266.0, "2h 17m"), (8280.0, "2h 18m"), (90061.0, "25h 01m"),
            (-1.0, "–"), (f64::NAN, "–"), (f64::INFINITY, "–"),
        ];
        for (seconds, words) in cases {
            assert_eq!(duration_words(seconds), words, "{seconds}");
        }
    }

    #[test]
    fn the_median_of_odd_and_even_counts() {
        assert_eq!(super::median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(super::median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(super::median(Vec::new()).is_nan());
    }
}
