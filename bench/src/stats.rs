//! Medians, percentiles and number formatting.

use std::time::Duration;

/// The median of `values` (0 for none).
pub fn median(values: &[f64]) -> f64 {
    percentile(values, 50.0)
}

/// The median of `figure` over every run of every design.
pub fn median_over_all<T>(runs: &[Vec<T>], figure: impl Fn(&T) -> f64) -> f64 {
    median(&runs.iter().flatten().map(figure).collect::<Vec<_>>())
}

/// The `p`-th percentile (nearest rank) of `values` (0 for none).
pub fn percentile(values: &[f64], p: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(|a, b| a.total_cmp(b));
    percentile_sorted(&sorted, p)
}

/// The `p`-th percentile of already sorted values.
pub fn percentile_sorted(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    if p == 50.0 && sorted.len().is_multiple_of(2) {
        let upper = sorted.len() / 2;
        return (sorted[upper - 1] + sorted[upper]) / 2.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// `a / b`, or NaN when `b` is 0.
pub fn ratio(a: f64, b: f64) -> f64 {
    if b == 0.0 {
        f64::NAN
    } else {
        a / b
    }
}

/// A rate or count with thousands separators: 123,456.
pub fn thousands(value: f64) -> String {
    if !value.is_finite() {
        return "n/a".into();
    }
    let rounded = value.round() as i64;
    let digits = rounded.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if rounded < 0 {
        format!("-{out}")
    } else {
        out
    }
}

/// A ratio as `1.23x`.
pub fn times(value: f64) -> String {
    if !value.is_finite() {
        "n/a".into()
    } else if value >= 1000.0 {
        format!("{}x", thousands(value))
    } else if value >= 100.0 {
        format!("{value:.0}x")
    } else if value >= 10.0 {
        format!("{value:.1}x")
    } else if value >= 0.1 || value == 0.0 {
        format!("{value:.2}x")
    } else if value >= 0.001 {
        format!("{value:.3}x")
    } else {
        "< 0.001x".into()
    }
}

/// Microseconds with two decimals.
pub fn us(value: f64) -> String {
    if !value.is_finite() {
        "n/a".into()
    } else if value >= 1000.0 {
        format!("{} µs", thousands(value))
    } else {
        format!("{value:.2} µs")
    }
}

/// A duration in fractional milliseconds.
pub fn as_ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_percentiles() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&values, 99.0), 99.0);
        assert_eq!(percentile(&values, 100.0), 100.0);
        assert_eq!(percentile(&[], 99.0), 0.0);
    }

    #[test]
    fn formats() {
        assert_eq!(thousands(1234567.4), "1,234,567");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(times(0.9049), "0.90x");
        assert_eq!(times(12.34), "12.3x");
        assert_eq!(times(0.0123), "0.012x");
    }
}
