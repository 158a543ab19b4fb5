//! Exponential backoff with full jitter: retry n waits a random time in
//! [base·2ⁿ/2, base·2ⁿ], capped, so that workers retrying together spread out.

use std::time::Duration;

use rand::Rng;

pub fn retry_delay(retry: u32, base: Duration, max: Duration) -> Duration {
    let ceiling = base
        .saturating_mul(2u32.saturating_pow(retry.min(20)))
        .min(max);
    let floor = ceiling / 2;
    let spread = ceiling.saturating_sub(floor).as_millis() as u64;
    floor + Duration::from_millis(rand::thread_rng().gen_range(0..=spread))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_and_stay_within_bounds() {
        let base = Duration::from_millis(100);
        let max = Duration::from_secs(2);
        for retry in 0..30 {
            let ceiling = (base * 2u32.pow(retry.min(20))).min(max);
            for _ in 0..20 {
                let delay = retry_delay(retry, base, max);
                assert!(
                    delay <= ceiling && delay >= ceiling / 2,
                    "{retry}: {delay:?}"
                );
            }
        }
    }
}
