//! What a batch of budgeted registrations does, decided in queue order from what the
//! database said under the agents' locks: each registration is judged exactly as if
//! it had run alone after the ones before it. A key already stored answers a replay or
//! a reuse; a key accepted earlier in the batch, the same about that one; otherwise the
//! amount is accepted if it fits in what the agent has spent in the window plus what
//! the batch accepted before it. A refused registration reserves nothing.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;

use crate::operations::OperationRecord;

/// One registration of the batch, as the walk needs it.
pub(crate) struct Candidate<'a> {
    pub agent_id: &'a str,
    pub key: &'a str,
    pub currency: &'a str,
    pub amount: Decimal,
    pub budget: Decimal,
    /// Not checked against the agent's row, or checked and confirmed by it.
    pub confirmed: bool,
}

/// An agent's spending in one currency over the window, as read under its lock.
#[derive(Debug, Clone)]
pub(crate) struct Window {
    pub spent: Decimal,
    /// When the oldest spending leaves the window (`None`: nothing spent in it).
    pub frees_at: Option<DateTime<Utc>>,
    /// When spending made now would leave it.
    pub frees_if_spent_now: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq)]
// One per registration of a batch, moved once, as `Registration`.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Decision {
    /// Fits: to be inserted.
    Insert,
    /// Over the budget, with the spending it saw.
    Exceeded {
        spent: Decimal,
        frees_at: Option<DateTime<Utc>>,
    },
    /// The key names this stored operation.
    Stored(OperationRecord),
    /// The key was accepted earlier in the batch, by the registration at this index.
    SameKeyAs(usize),
    /// Its agent's row did not confirm it: nothing written, nothing answered from it.
    Unconfirmed,
}

/// `candidates` in order; `windows` by (agent, currency) and `stored` by (agent, key)
/// must hold every pair the candidates name (a missing window is a bug, not zero).
pub(crate) fn decide<'a>(
    candidates: &[Candidate<'a>],
    mut windows: HashMap<(&'a str, &'a str), Window>,
    stored: &HashMap<(&'a str, &'a str), OperationRecord>,
) -> Result<Vec<Decision>, String> {
    let mut accepted: HashMap<(&str, &str), usize> = HashMap::new();
    let mut decisions = Vec::with_capacity(candidates.len());
    for (index, candidate) in candidates.iter().enumerate() {
        if !candidate.confirmed {
            decisions.push(Decision::Unconfirmed);
            continue;
        }
        let key = (candidate.agent_id, candidate.key);
        if let Some(record) = stored.get(&key) {
            decisions.push(Decision::Stored(record.clone()));
            continue;
        }
        if let Some(&earlier) = accepted.get(&key) {
            decisions.push(Decision::SameKeyAs(earlier));
            continue;
        }
        let window = windows
            .get_mut(&(candidate.agent_id, candidate.currency))
            .ok_or_else(|| format!("no window read for agent {}", candidate.agent_id))?;
        if window.spent + candidate.amount > candidate.budget {
            decisions.push(Decision::Exceeded {
                spent: window.spent,
                frees_at: window.frees_at,
            });
            continue;
        }
        window.spent += candidate.amount;
        if candidate.amount > Decimal::ZERO && window.frees_at.is_none() {
            window.frees_at = Some(window.frees_if_spent_now);
        }
        accepted.insert(key, index);
        decisions.push(Decision::Insert);
    }
    Ok(decisions)
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn candidate<'a>(agent_id: &'a str, key: &'a str, amount: i64) -> Candidate<'a> {
        Candidate {
            agent_id,
            key,
            currency: "USD",
            amount: Decimal::from(amount),
            budget: Decimal::from(100),
            confirmed: true,
        }
    }

    fn hour(h: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 7, h, 0, 0).unwrap()
    }

    fn windows<'a>(spent: &[(&'a str, i64, Option<u32>)]) -> HashMap<(&'a str, &'a str), Window> {
        spent
            .iter()
            .map(|&(agent, spent, frees_at)| {
                let window = Window {
                    spent: Decimal::from(spent),
                    frees_at: frees_at.map(hour),
                    frees_if_spent_now: hour(23),
                };
                ((agent, "USD"), window)
            })
            .collect()
    }

    #[test]
    fn what_fits_is_accepted_in_order_and_a_refusal_reserves_nothing() {
        let batch = [
            candidate("a", "k1", 60),
            candidate("a", "k2", 60),
            candidate("a", "k3", 40),
            candidate("a", "k4", 1),
        ];
        let decisions = decide(&batch, windows(&[("a", 0, None)]), &HashMap::new()).unwrap();
        assert_eq!(
            decisions,
            [
                Decision::Insert,
                Decision::Exceeded {
                    spent: Decimal::from(60),
                    frees_at: Some(hour(23))
                },
                Decision::Insert,
                Decision::Exceeded {
                    spent: Decimal::from(100),
                    frees_at: Some(hour(23))
                },
            ]
        );
    }

    #[test]
    fn each_agent_spends_against_its_own_window_and_keeps_its_oldest_spending() {
        let batch = [candidate("a", "k", 50), candidate("b", "k", 50)];
        let decisions = decide(
            &batch,
            windows(&[("a", 60, Some(5)), ("b", 0, None)]),
            &HashMap::new(),
        )
        .unwrap();
        assert_eq!(
            decisions,
            [
                Decision::Exceeded {
                    spent: Decimal::from(60),
                    frees_at: Some(hour(5))
                },
                Decision::Insert
            ]
        );
    }

    #[test]
    fn a_key_accepted_earlier_answers_for_later_ones_but_a_refused_one_does_not() {
        let batch = [
            candidate("a", "big", 200),
            candidate("a", "k", 10),
            candidate("a", "k", 20),
            candidate("a", "big", 10),
        ];
        let decisions = decide(&batch, windows(&[("a", 0, None)]), &HashMap::new()).unwrap();
        assert_eq!(
            decisions[0],
            Decision::Exceeded {
                spent: Decimal::ZERO,
                frees_at: None
            }
        );
        assert_eq!(decisions[1], Decision::Insert);
        assert_eq!(decisions[2], Decision::SameKeyAs(1));
        assert_eq!(decisions[3], Decision::Insert, "the refused key is free");
    }

    #[test]
    fn an_unconfirmed_registration_takes_no_key_and_reserves_nothing() {
        let unconfirmed = Candidate {
            confirmed: false,
            ..candidate("a", "k1", 60)
        };
        let batch = [
            unconfirmed,
            candidate("a", "k1", 60),
            candidate("a", "k2", 40),
        ];
        let decisions = decide(&batch, windows(&[("a", 0, None)]), &HashMap::new()).unwrap();
        assert_eq!(
            decisions,
            [Decision::Unconfirmed, Decision::Insert, Decision::Insert]
        );
    }

    #[test]
    fn a_window_not_read_is_an_error_not_zero() {
        let batch = [candidate("a", "k", 10)];
        assert!(decide(&batch, HashMap::new(), &HashMap::new()).is_err());
    }
}
