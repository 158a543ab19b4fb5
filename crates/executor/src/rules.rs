//! What the executor makes of a claim and of each provider answer: pure functions, so
//! that every rule is tested case by case (the worker only carries them out).
//!
//! | provider says                                  | next step                               |
//! |------------------------------------------------|-----------------------------------------|
//! | succeeded                                      | SUCCEEDED with the reference            |
//! | declined                                       | FAILED with the provider's code         |
//! | pending                                        | UNKNOWN: the reconciler follows up      |
//! | definitive refusal, nothing sent before        | FAILED with the provider's error        |
//! | definitive refusal after an uncertain attempt  | UNKNOWN (the earlier attempt may have done it) |
//! | not sent, nothing sent before                  | requeue with backoff; FAILED past the attempts |
//! | not sent after an uncertain attempt, uncertain or timed out | same key again while attempts last and the provider deduplicates; else UNKNOWN |
//! | uncertain, and the provider advises no retry   | UNKNOWN at once                         |
//! | throttled (429), nothing sent before           | requeue after its Retry-After; not counted as an attempt |
//! | throttled after an uncertain attempt           | wait its Retry-After in this claim, then the same key; not counted |
//!
//! "An uncertain attempt" is any earlier call that may have reached the provider: one
//! of this claim's (`Attempt::answered` carries it to the next call) or the previous
//! owner's, whose lease expired mid-call (`Attempt::first_call` of a takeover).
//!
//! A throttled call was not taken on by the provider, so it is not an attempt: it
//! neither uses up `--max-attempts` nor grows a requeue's backoff, and throttling alone
//! never makes an operation FAILED or UNKNOWN. After an uncertain attempt it is waited
//! out inside the claim rather than requeued, because a new claim would start without
//! knowing that an earlier call may have reached the provider (and would then take a
//! refusal for a first-hand one).

use std::time::Duration;

use opgate_domain::backoff::retry_delay;
use opgate_domain::{OperationStatus, Transition};
use opgate_provider::ProviderOutcome;
use rand::Rng;

/// What is known when an answer arrives.
#[derive(Debug, Clone, Copy)]
pub struct Attempt {
    /// Whether any earlier request (this claim's, or a previous owner's) may have
    /// reached the provider.
    pub maybe_sent: bool,
    /// Provider calls made for the operation so far, this one included.
    pub calls: u32,
    pub max_attempts: u32,
    /// The provider deduplicates by key, so the same request may be sent again.
    pub keyed_retries_safe: bool,
    /// Requeues so far (for the requeue backoff).
    pub retry_count: u32,
    pub retry_base: Duration,
    pub retry_max: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Write(Transition),
    /// The request never left: put the operation back with a delay.
    Requeue {
        delay: Duration,
        error: String,
    },
    /// Send again under the same key (after the worker's own backoff).
    RetrySameKey {
        cause: String,
    },
    /// The provider rate limited a call and nothing earlier may have reached it: put
    /// the operation back, due after `delay`, without counting the call.
    Throttled {
        delay: Duration,
    },
    /// The provider rate limited a call after one that may have reached it: wait
    /// `delay` in this claim, then send the same key again, without counting the call.
    WaitSameKey {
        delay: Duration,
    },
}

impl Attempt {
    /// The first call of a claim. A claim taken over from an owner whose lease expired
    /// mid-call starts as possibly sent: that owner may have reached the provider.
    pub fn first_call(
        claim: &Claim,
        retry_count: u32,
        retry_base: Duration,
        retry_max: Duration,
    ) -> Self {
        Self {
            maybe_sent: claim.taken_over,
            calls: claim.attempts.max(1),
            max_attempts: claim.max_attempts,
            keyed_retries_safe: claim.keyed_retries_safe,
            retry_count,
            retry_base,
            retry_max,
        }
    }

    /// The step this call's answer leads to. When it is to send again, `self` becomes
    /// the next call's: one more call, and possibly sent, since the same key is sent
    /// again only after an answer that may have reached the provider (uncertain, timed
    /// out) or one that proves nothing about an earlier call that may have. A call
    /// waited out after throttling is not one more: the next call takes its place.
    pub fn answered(&mut self, outcome: ProviderOutcome) -> Step {
        let step = after_answer(outcome, self);
        if let Step::RetrySameKey { .. } = step {
            self.maybe_sent = true;
            self.calls += 1;
        }
        step
    }
}

/// The step an answer leads to.
pub fn after_answer(outcome: ProviderOutcome, attempt: &Attempt) -> Step {
    use OperationStatus::*;
    let uncertain_cause = match outcome {
        ProviderOutcome::Succeeded { reference } => {
            return Step::Write(
                Transition::to(Succeeded, "provider confirmed the operation")
                    .with_reference(Some(reference)),
            )
        }
        ProviderOutcome::Declined { reference, code } => {
            return Step::Write(
                Transition::to(Failed, "provider declined")
                    .with_reference(reference)
                    .with_error(format!("declined by the provider: {code}")),
            )
        }
        // A refusal proves nothing about an earlier attempt that may have reached the
        // provider: only a first-hand refusal is a failure.
        ProviderOutcome::Rejected { status, detail } if !attempt.maybe_sent => {
            return Step::Write(
                Transition::to(Failed, "provider rejected the request").with_error(format!(
                    "provider rejected the request (HTTP {status}): {detail}"
                )),
            )
        }
        ProviderOutcome::Rejected { status, detail } => {
            return Step::Write(
                Transition::to(Unknown, "outcome uncertain; the reconciler follows up")
                    .with_error(format!(
                        "provider rejected a retry (HTTP {status}): {detail}; an earlier attempt may have reached it"
                    )),
            )
        }
        // Not taken on: no evidence of anything, and not an attempt.
        ProviderOutcome::Throttled { retry_after } if !attempt.maybe_sent => {
            return Step::Throttled {
                delay: throttle_delay(retry_after),
            }
        }
        ProviderOutcome::Throttled { retry_after } if attempt.keyed_retries_safe => {
            return Step::WaitSameKey {
                delay: throttle_delay(retry_after),
            }
        }
        ProviderOutcome::Throttled { .. } => {
            return Step::Write(
                Transition::to(Unknown, "outcome uncertain; the reconciler follows up").with_error(
                    "provider rate limited a retry (HTTP 429); an earlier attempt may have reached it",
                ),
            )
        }
        ProviderOutcome::Pending { reference } => {
            return Step::Write(
                Transition::to(Unknown, "pending at the provider; the reconciler follows up")
                    .with_reference(reference)
                    .with_error("provider reports the operation as pending"),
            )
        }
        ProviderOutcome::NotSent { cause } if !attempt.maybe_sent => {
            if attempt.calls >= attempt.max_attempts {
                return Step::Write(
                    Transition::to(Failed, "never reached the provider").with_error(format!(
                        "never reached the provider after {} attempts: {cause}",
                        attempt.calls
                    )),
                );
            }
            return Step::Requeue {
                delay: retry_delay(attempt.retry_count, attempt.retry_base, attempt.retry_max),
                error: cause,
            };
        }
        ProviderOutcome::UncertainFinal { cause } => {
            return Step::Write(
                Transition::to(
                    Unknown,
                    "outcome uncertain and the provider advises against a retry; the reconciler follows up",
                )
                .with_error(cause),
            )
        }
        ProviderOutcome::NotSent { cause }
        | ProviderOutcome::Uncertain { cause }
        | ProviderOutcome::TimedOut { cause } => cause,
    };
    if !attempt.keyed_retries_safe || attempt.calls >= attempt.max_attempts {
        return Step::Write(
            Transition::to(Unknown, "outcome uncertain; the reconciler follows up")
                .with_error(uncertain_cause),
        );
    }
    Step::RetrySameKey {
        cause: uncertain_cause,
    }
}

/// The provider's wait plus up to a fifth more, so that operations throttled together
/// do not all come back in the same instant; never less than it asked.
pub fn throttle_delay(retry_after: Duration) -> Duration {
    let spread = (retry_after / 5).as_millis() as u64;
    retry_after + Duration::from_millis(rand::thread_rng().gen_range(0..=spread))
}

/// What is known about a claim before any call.
#[derive(Debug, Clone, Copy)]
pub struct Claim {
    /// A previous owner's lease expired while the operation was IN_PROGRESS.
    pub taken_over: bool,
    /// Claims so far, this one included (each claim counts as an attempt).
    pub attempts: u32,
    pub max_attempts: u32,
    pub keyed_retries_safe: bool,
}

/// A claim that must not be sent at all, and what to write instead; `None` to call.
pub fn before_call(claim: &Claim) -> Option<Transition> {
    if !claim.taken_over {
        return None;
    }
    if !claim.keyed_retries_safe {
        return Some(
            Transition::to(
                OperationStatus::Unknown,
                "abandoned mid-call; not re-sent because keyed retries are off",
            )
            .with_error("a previous executor's lease expired during execution"),
        );
    }
    // An operation whose every execution ends with its executor gone (a crash it
    // causes, say) is not sent again forever.
    if claim.attempts > claim.max_attempts {
        return Some(
            Transition::to(
                OperationStatus::Unknown,
                "abandoned mid-call with no attempts left; the reconciler follows up",
            )
            .with_error(format!(
                "abandoned mid-call; not re-sent after {} attempts",
                claim.attempts - 1
            )),
        );
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use OperationStatus::*;

    fn attempt() -> Attempt {
        Attempt {
            maybe_sent: false,
            calls: 1,
            max_attempts: 3,
            keyed_retries_safe: true,
            retry_count: 0,
            retry_base: Duration::from_millis(100),
            retry_max: Duration::from_secs(1),
        }
    }

    fn written(step: Step) -> Transition {
        match step {
            Step::Write(transition) => transition,
            other => panic!("expected a write, got {other:?}"),
        }
    }

    fn uncertain() -> ProviderOutcome {
        ProviderOutcome::Uncertain {
            cause: "timed out".into(),
        }
    }

    fn timed_out() -> ProviderOutcome {
        ProviderOutcome::TimedOut {
            cause: "no complete answer within 10000 ms".into(),
        }
    }

    fn rejected() -> ProviderOutcome {
        ProviderOutcome::Rejected {
            status: 409,
            detail: "conflict".into(),
        }
    }

    fn throttled() -> ProviderOutcome {
        ProviderOutcome::Throttled {
            retry_after: Duration::from_secs(2),
        }
    }

    fn not_sent() -> ProviderOutcome {
        ProviderOutcome::NotSent {
            cause: "refused".into(),
        }
    }

    #[test]
    fn success_records_the_reference() {
        let t = written(after_answer(
            ProviderOutcome::Succeeded {
                reference: "pay_1".into(),
            },
            &attempt(),
        ));
        assert_eq!(t.to, Succeeded);
        assert_eq!(t.provider_reference.as_deref(), Some("pay_1"));
        assert_eq!(t.last_error, None);
    }

    #[test]
    fn a_decline_fails_with_the_code_even_after_an_uncertain_attempt() {
        let answer = || ProviderOutcome::Declined {
            reference: Some("pay_2".into()),
            code: "card_declined".into(),
        };
        for maybe_sent in [false, true] {
            let t = written(after_answer(
                answer(),
                &Attempt {
                    maybe_sent,
                    ..attempt()
                },
            ));
            assert_eq!(t.to, Failed);
            assert_eq!(t.provider_reference.as_deref(), Some("pay_2"));
            assert_eq!(
                t.last_error.as_deref(),
                Some("declined by the provider: card_declined")
            );
        }
    }

    #[test]
    fn pending_goes_to_the_reconciler_with_its_reference() {
        let t = written(after_answer(
            ProviderOutcome::Pending {
                reference: Some("pay_3".into()),
            },
            &attempt(),
        ));
        assert_eq!(t.to, Unknown);
        assert_eq!(t.provider_reference.as_deref(), Some("pay_3"));
        assert_eq!(t.next_check_in, None, "checked at once");
    }

    #[test]
    fn a_first_hand_refusal_is_a_failure() {
        let t = written(after_answer(rejected(), &attempt()));
        assert_eq!(t.to, Failed);
        assert_eq!(
            t.last_error.as_deref(),
            Some("provider rejected the request (HTTP 409): conflict")
        );
    }

    #[test]
    fn a_refusal_after_an_uncertain_attempt_proves_nothing() {
        let step = after_answer(
            rejected(),
            &Attempt {
                maybe_sent: true,
                ..attempt()
            },
        );
        let t = written(step);
        assert_eq!(t.to, Unknown);
        assert!(t
            .last_error
            .unwrap()
            .contains("an earlier attempt may have reached it"));
    }

    #[test]
    fn not_sent_is_requeued_with_backoff_until_the_attempts_run_out() {
        let step = after_answer(
            not_sent(),
            &Attempt {
                retry_count: 2,
                ..attempt()
            },
        );
        // The third requeue waits base·2² with full jitter: 200..=400 ms.
        match step {
            Step::Requeue { delay, error } => {
                assert!((200..=400).contains(&delay.as_millis()), "{delay:?}");
                assert_eq!(error, "refused");
            }
            other => panic!("expected a requeue, got {other:?}"),
        }
        let last = after_answer(
            not_sent(),
            &Attempt {
                calls: 3,
                ..attempt()
            },
        );
        let t = written(last);
        assert_eq!(t.to, Failed);
        assert_eq!(
            t.last_error.as_deref(),
            Some("never reached the provider after 3 attempts: refused")
        );
    }

    #[test]
    fn not_sent_after_an_uncertain_attempt_is_never_a_failure() {
        let retry = after_answer(
            not_sent(),
            &Attempt {
                maybe_sent: true,
                ..attempt()
            },
        );
        assert!(matches!(retry, Step::RetrySameKey { .. }));
        let out = after_answer(
            not_sent(),
            &Attempt {
                maybe_sent: true,
                calls: 3,
                ..attempt()
            },
        );
        assert_eq!(written(out).to, Unknown);
    }

    #[test]
    fn an_uncertain_answer_is_retried_under_the_same_key_then_unknown_never_failed() {
        assert_eq!(
            after_answer(uncertain(), &attempt()),
            Step::RetrySameKey {
                cause: "timed out".into()
            }
        );
        let exhausted = after_answer(
            uncertain(),
            &Attempt {
                calls: 3,
                ..attempt()
            },
        );
        assert_eq!(written(exhausted).to, Unknown);
        let unsafe_retries = after_answer(
            uncertain(),
            &Attempt {
                keyed_retries_safe: false,
                ..attempt()
            },
        );
        let t = written(unsafe_retries);
        assert_eq!(t.to, Unknown);
        assert_eq!(t.last_error.as_deref(), Some("timed out"));
    }

    #[test]
    fn a_timeout_is_as_uncertain_as_any_lost_answer() {
        assert_eq!(
            after_answer(timed_out(), &attempt()),
            Step::RetrySameKey {
                cause: "no complete answer within 10000 ms".into()
            }
        );
        let last = written(after_answer(
            timed_out(),
            &Attempt {
                calls: 3,
                ..attempt()
            },
        ));
        assert_eq!(last.to, Unknown);
        assert_eq!(
            last.last_error.as_deref(),
            Some("no complete answer within 10000 ms")
        );
    }

    #[test]
    fn no_answer_without_evidence_ever_fails() {
        let final_ = || ProviderOutcome::UncertainFinal { cause: "?".into() };
        let answers: [fn() -> ProviderOutcome; 3] = [uncertain, timed_out, throttled];
        for maybe_sent in [false, true] {
            for calls in 1..=4 {
                for keyed_retries_safe in [false, true] {
                    let a = Attempt {
                        maybe_sent,
                        calls,
                        keyed_retries_safe,
                        ..attempt()
                    };
                    for answer in answers.iter().map(|f| f()).chain([final_()]) {
                        if let Step::Write(t) = after_answer(answer.clone(), &a) {
                            assert_ne!(t.to, Failed, "{answer:?} {a:?}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_throttled_call_is_requeued_after_its_retry_after_and_not_counted() {
        // Even as the last of the attempts: throttling never fails an operation.
        for calls in [1, 3] {
            let mut a = Attempt { calls, ..attempt() };
            match a.answered(throttled()) {
                Step::Throttled { delay } => assert!(
                    delay >= Duration::from_secs(2) && delay <= Duration::from_millis(2400),
                    "{delay:?}"
                ),
                other => panic!("expected a throttled requeue, got {other:?}"),
            }
            assert_eq!((a.calls, a.maybe_sent), (calls, false), "not counted");
        }
    }

    #[test]
    fn a_throttled_retry_after_an_uncertain_call_waits_in_the_claim_and_keeps_its_doubt() {
        let mut a = Attempt::first_call(&claim(), 0, BASE, MAX);
        assert_eq!(then(&a.answered(timed_out())), Then::Retry);
        assert_eq!(a.calls, 2);
        match a.answered(throttled()) {
            Step::WaitSameKey { delay } => assert!(delay >= Duration::from_secs(2)),
            other => panic!("expected a wait in the claim, got {other:?}"),
        }
        assert_eq!(
            (a.calls, a.maybe_sent),
            (2, true),
            "not counted, still in doubt"
        );
        // The call after the wait is the third of three: a refusal is still no evidence.
        assert_eq!(written(a.answered(rejected())).to, Unknown);
        // Without keyed retries nothing is sent twice: the reconciler takes over.
        let unkeyed = Attempt {
            maybe_sent: true,
            keyed_retries_safe: false,
            ..attempt()
        };
        let t = written(after_answer(throttled(), &unkeyed));
        assert_eq!(t.to, Unknown);
        assert!(t.last_error.unwrap().contains("HTTP 429"));
    }

    #[test]
    fn the_throttle_delay_is_the_wait_asked_plus_at_most_a_fifth() {
        for _ in 0..50 {
            let d = throttle_delay(Duration::from_millis(1000));
            assert!(d >= Duration::from_millis(1000) && d <= Duration::from_millis(1200));
        }
        assert_eq!(throttle_delay(Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn an_uncertain_answer_the_provider_says_not_to_retry_goes_to_the_reconciler_at_once() {
        let step = after_answer(
            ProviderOutcome::UncertainFinal {
                cause: "Stripe api_error".into(),
            },
            &attempt(),
        );
        let t = written(step);
        assert_eq!(t.to, Unknown);
        assert_eq!(t.last_error.as_deref(), Some("Stripe api_error"));
    }

    // Rule by rule: every provider answer, in every situation a call can be in, as
    // the worker reaches it (`Attempt::first_call`, then `answered` for each call).

    /// What a step comes to, for the table below.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Then {
        Write(OperationStatus),
        Requeue,
        Retry,
        Throttled,
        Wait,
    }

    fn then(step: &Step) -> Then {
        match step {
            Step::Write(t) => Then::Write(t.to),
            Step::Requeue { .. } => Then::Requeue,
            Step::RetrySameKey { .. } => Then::Retry,
            Step::Throttled { .. } => Then::Throttled,
            Step::WaitSameKey { .. } => Then::Wait,
        }
    }

    const BASE: Duration = Duration::from_millis(100);
    const MAX: Duration = Duration::from_secs(1);

    fn claim() -> Claim {
        Claim {
            taken_over: false,
            attempts: 1,
            max_attempts: 3,
            keyed_retries_safe: true,
        }
    }

    /// The situations a call can be in, each built the way the worker builds it, and
    /// whether an earlier call may have reached the provider.
    fn situations(max_attempts: u32, keyed: bool) -> Vec<(&'static str, Attempt, bool)> {
        let fresh = Claim {
            max_attempts,
            keyed_retries_safe: keyed,
            ..claim()
        };
        let mut all = vec![(
            "first call of a fresh claim",
            Attempt::first_call(&fresh, 0, BASE, MAX),
            false,
        )];
        if !keyed {
            // Without keyed retries nothing is sent twice: an uncertain answer ends
            // the claim, and a takeover is never sent (before_call).
            return all;
        }
        for (name, earlier) in [
            ("retry after an uncertain answer", uncertain()),
            ("retry after a timeout", timed_out()),
        ] {
            let mut a = Attempt::first_call(&fresh, 0, BASE, MAX);
            assert_eq!(then(&a.answered(earlier)), Then::Retry);
            all.push((name, a, true));
        }
        let taken_over = Claim {
            taken_over: true,
            attempts: 2,
            ..fresh
        };
        all.push((
            "first call after taking over an abandoned lease",
            Attempt::first_call(&taken_over, 0, BASE, MAX),
            true,
        ));
        all
    }

    fn expected(answer: &ProviderOutcome, sent_before: bool, left: bool, keyed: bool) -> Then {
        use ProviderOutcome as P;
        match answer {
            P::Succeeded { .. } => Then::Write(Succeeded),
            P::Declined { .. } => Then::Write(Failed),
            P::Pending { .. } => Then::Write(Unknown),
            P::Rejected { .. } if sent_before => Then::Write(Unknown),
            P::Rejected { .. } => Then::Write(Failed),
            P::NotSent { .. } if !sent_before && left => Then::Requeue,
            P::NotSent { .. } if !sent_before => Then::Write(Failed),
            P::UncertainFinal { .. } => Then::Write(Unknown),
            // Whatever the attempts left: a throttled call is not one.
            P::Throttled { .. } if !sent_before => Then::Throttled,
            P::Throttled { .. } => Then::Wait,
            P::NotSent { .. } | P::Uncertain { .. } | P::TimedOut { .. } if left && keyed => {
                Then::Retry
            }
            P::NotSent { .. } | P::Uncertain { .. } | P::TimedOut { .. } => Then::Write(Unknown),
        }
    }

    fn every_answer() -> Vec<ProviderOutcome> {
        vec![
            ProviderOutcome::Succeeded {
                reference: "pay_1".into(),
            },
            ProviderOutcome::Declined {
                reference: None,
                code: "card_declined".into(),
            },
            ProviderOutcome::Pending { reference: None },
            ProviderOutcome::Rejected {
                status: 400,
                detail: "bad".into(),
            },
            rejected(),
            ProviderOutcome::Rejected {
                status: 422,
                detail: "invalid".into(),
            },
            not_sent(),
            uncertain(),
            timed_out(),
            ProviderOutcome::UncertainFinal { cause: "?".into() },
            throttled(),
        ]
    }

    #[test]
    fn every_answer_in_every_situation_leads_to_its_rule() {
        for keyed in [true, false] {
            // Calls left after this one (max 9), and none left (max: the calls made).
            for left in [true, false] {
                for (situation, attempt, sent_before) in situations(9, keyed) {
                    let attempt = Attempt {
                        max_attempts: if left { 9 } else { attempt.calls },
                        ..attempt
                    };
                    for answer in every_answer() {
                        let mut this_call = attempt;
                        let step = this_call.answered(answer.clone());
                        assert_eq!(
                            then(&step),
                            expected(&answer, sent_before, left, keyed),
                            "{answer:?} on the {situation} (calls left: {left}, keyed retries: {keyed})"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_refusal_of_the_retry_after_a_timeout_is_unknown_never_failed() {
        // The seed's scenario: the first call timed out (the provider may have charged),
        // and the retry is refused. A 400 or a 409 then says nothing about the first.
        for status in [400, 404, 409, 422] {
            let mut a = Attempt::first_call(&claim(), 0, BASE, MAX);
            assert_eq!(then(&a.answered(timed_out())), Then::Retry);
            assert!(a.maybe_sent);
            let t = written(a.answered(ProviderOutcome::Rejected {
                status,
                detail: "idempotency key in use".into(),
            }));
            assert_eq!(t.to, Unknown, "HTTP {status}");
            assert!(t
                .last_error
                .unwrap()
                .contains(&format!("provider rejected a retry (HTTP {status})")));
        }
    }

    #[test]
    fn a_not_sent_retry_keeps_the_earlier_uncertainty() {
        let fresh = Claim {
            max_attempts: 9,
            ..claim()
        };
        let mut a = Attempt::first_call(&fresh, 0, BASE, MAX);
        assert_eq!(then(&a.answered(uncertain())), Then::Retry);
        assert_eq!(then(&a.answered(not_sent())), Then::Retry);
        assert!(
            a.maybe_sent,
            "a call that never left erased the earlier one"
        );
        assert_eq!(written(a.answered(rejected())).to, Unknown);
    }

    #[test]
    fn a_call_that_never_left_is_requeued_as_a_new_claim_not_retried_in_this_one() {
        let mut a = Attempt::first_call(&claim(), 0, BASE, MAX);
        assert_eq!(then(&a.answered(not_sent())), Then::Requeue);
        assert_eq!((a.maybe_sent, a.calls), (false, 1), "nothing carried over");
    }

    #[test]
    fn each_retry_counts_one_more_call_and_a_write_none() {
        let mut a = Attempt::first_call(
            &Claim {
                attempts: 2,
                ..claim()
            },
            0,
            BASE,
            MAX,
        );
        assert_eq!(a.calls, 2);
        assert_eq!(then(&a.answered(uncertain())), Then::Retry);
        assert_eq!(a.calls, 3);
        // The third call of three: no retry left.
        let t = written(a.answered(uncertain()));
        assert_eq!(t.to, Unknown);
        assert_eq!(a.calls, 3);
    }

    #[test]
    fn the_first_call_takes_the_claims_count_and_backoff() {
        let a = Attempt::first_call(
            &Claim {
                attempts: 0,
                max_attempts: 4,
                keyed_retries_safe: false,
                taken_over: false,
            },
            2,
            BASE,
            MAX,
        );
        assert_eq!(
            (
                a.maybe_sent,
                a.calls,
                a.max_attempts,
                a.keyed_retries_safe,
                a.retry_count
            ),
            (false, 1, 4, false, 2)
        );
        assert_eq!((a.retry_base, a.retry_max), (BASE, MAX));
        let taken = Attempt::first_call(
            &Claim {
                taken_over: true,
                attempts: 3,
                ..claim()
            },
            0,
            BASE,
            MAX,
        );
        assert!(taken.maybe_sent);
        assert_eq!(taken.calls, 3);
    }

    #[test]
    fn a_fresh_claim_is_sent() {
        assert_eq!(before_call(&claim()), None);
        assert_eq!(
            before_call(&Claim {
                attempts: 9,
                ..claim()
            }),
            None
        );
    }

    #[test]
    fn a_takeover_is_re_sent_only_with_keyed_retries_and_attempts_left() {
        let taken = Claim {
            taken_over: true,
            attempts: 2,
            ..claim()
        };
        assert_eq!(before_call(&taken), None);
        assert_eq!(
            before_call(&Claim {
                attempts: 3,
                ..taken
            }),
            None,
            "the last attempt is still sent"
        );
        let no_keyed = before_call(&Claim {
            keyed_retries_safe: false,
            ..taken
        })
        .unwrap();
        assert_eq!(no_keyed.to, OperationStatus::Unknown);
        assert_eq!(
            no_keyed.last_error.as_deref(),
            Some("a previous executor's lease expired during execution")
        );
        let exhausted = before_call(&Claim {
            attempts: 4,
            ..taken
        })
        .unwrap();
        assert_eq!(exhausted.to, OperationStatus::Unknown);
        assert_eq!(
            exhausted.last_error.as_deref(),
            Some("abandoned mid-call; not re-sent after 3 attempts")
        );
    }
}
