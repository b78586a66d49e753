//! Figures as a person reads them, the same in `todoctl`'s screens and the
//! daemon's reports: durations, counts and sizes in the unit that shows
//! them.

/// `45s`, `3m20s`, `2h05m`.
pub fn duration(secs: i64) -> String {
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m{:02}s", s / 60, s % 60),
        s => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// `950`, `12.3k`, `4.56M`.
pub fn count(n: f64) -> String {
    if n >= 1e6 {
        format!("{:.2}M", n / 1e6)
    } else if n >= 1e4 {
        format!("{:.1}k", n / 1e3)
    } else {
        format!("{n:.0}")
    }
}

/// `512 B`, `340 kB`, `1.2 MB`, `3.40 GB`.
pub fn size(n: f64) -> String {
    if n >= 1e9 {
        format!("{:.2} GB", n / 1e9)
    } else if n >= 1e6 {
        format!("{:.1} MB", n / 1e6)
    } else if n >= 1e3 {
        format!("{:.0} kB", n / 1e3)
    } else {
        format!("{n:.0} B")
    }
}

/// `v` to `digits` significant figures: `274` for 273.615 at 3, `0.0123`
/// for 0.012345, `12300` for 12345.
pub fn significant(v: f64, digits: u32) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let magnitude = v.abs().log10().floor() as i32;
    let decimals = (digits as i32 - 1 - magnitude).max(0) as usize;
    let step = 10f64.powi(magnitude - digits as i32 + 1);
    let rounded = (v / step).round() * step;
    format!("{rounded:.decimals$}")
}

/// A list in words: `a`, `a and b`, `a, b and c`.
pub fn words(items: &[impl AsRef<str>]) -> String {
    match items {
        [] => String::new(),
        [one] => one.as_ref().to_string(),
        [rest @ .., last] => format!(
            "{} and {}",
            rest.iter()
                .map(AsRef::as_ref)
                .collect::<Vec<_>>()
                .join(", "),
            last.as_ref()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn significant_figures_and_lists_in_words() {
        assert_eq!(significant(273.615, 3), "274");
        assert_eq!(significant(0.012345, 3), "0.0123");
        assert_eq!(significant(12345.0, 3), "12300");
        assert_eq!(significant(2.5, 3), "2.50");
        assert_eq!(significant(0.0, 3), "0");
        assert_eq!(words(&["a"]), "a");
        assert_eq!(words(&["a", "b"]), "a and b");
        assert_eq!(words(&["a", "b", "c"]), "a, b and c");
        assert_eq!(words(&[] as &[&str]), "");
    }

    #[test]
    fn each_figure_in_the_unit_that_shows_it() {
        assert_eq!(duration(42), "42s");
        assert_eq!(duration(120), "2m00s");
        assert_eq!(duration(7300), "2h01m");
        assert_eq!(count(950.0), "950");
        assert_eq!(count(12_500.0), "12.5k");
        assert_eq!(count(3.2e6), "3.20M");
        assert_eq!(size(512.0), "512 B");
        assert_eq!(size(340e3), "340 kB");
        assert_eq!(size(2.5e6), "2.5 MB");
        assert_eq!(size(3.4e9), "3.40 GB");
    }
}
