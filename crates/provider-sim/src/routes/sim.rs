//! The simulator's own controls: `POST /_sim/faults` and
//! `POST /_sim/{payments|refunds|resources}/{id}/settle`.

use hyper::body::Incoming;
use hyper::{Request, StatusCode};

use super::{not_found, read_json, Handled};
use crate::faults::FaultSet;
use crate::model::SettleRequest;
use crate::state::{SettleError, SimState};

pub(super) async fn set_faults(state: &SimState, req: Request<Incoming>) -> Handled {
    let faults = match read_json::<FaultSet>(req).await {
        Ok(faults) => faults,
        Err(handled) => return handled,
    };
    if let Err(message) = faults.validate() {
        return Handled::bad_request(message);
    }
    state.set_faults(faults);
    tracing::info!(?faults, "faults replaced");
    Handled::json(StatusCode::OK, &faults)
}

/// What a settle path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Payment,
    Refund,
    Resource,
}

impl Kind {
    /// The failure code of a failed settlement that names none.
    fn default_failure_code(self) -> &'static str {
        match self {
            Kind::Payment => "card_declined",
            Kind::Refund => "refund_declined",
            Kind::Resource => "rejected",
        }
    }

    fn not_pending(self) -> &'static str {
        match self {
            Kind::Payment => "payment is not pending",
            Kind::Refund => "refund is not pending",
            Kind::Resource => "resource is not pending",
        }
    }
}

/// `/_sim/{payments|refunds|resources}/{id}/settle` → what and `id`.
pub(super) fn settle_target(path: &str) -> Option<(Kind, String)> {
    let rest = path.strip_prefix("/_sim/")?.strip_suffix("/settle")?;
    let (kind, id) = rest.split_once('/')?;
    let kind = match kind {
        "payments" => Kind::Payment,
        "refunds" => Kind::Refund,
        "resources" => Kind::Resource,
        _ => return None,
    };
    (!id.is_empty() && !id.contains('/')).then(|| (kind, id.to_owned()))
}

pub(super) async fn settle(
    state: &SimState,
    kind: Kind,
    id: String,
    req: Request<Incoming>,
) -> Handled {
    let settlement = match read_json::<SettleRequest>(req).await {
        Ok(body) => match body.validate(kind.default_failure_code()) {
            Ok(settlement) => settlement,
            Err(message) => return Handled::bad_request(message),
        },
        Err(handled) => return handled,
    };
    let settled = match kind {
        Kind::Payment => state
            .settle_payment(&id, settlement)
            .map(|p| Handled::record(StatusCode::OK, &p)),
        Kind::Refund => state
            .settle_refund(&id, settlement)
            .map(|r| Handled::record(StatusCode::OK, &r)),
        Kind::Resource => state
            .settle_resource(&id, settlement)
            .map(|r| Handled::record(StatusCode::OK, &r)),
    };
    match settled {
        Ok(handled) => handled,
        Err(SettleError::NotFound) => not_found(),
        Err(SettleError::NotPending) => Handled::error(StatusCode::CONFLICT, kind.not_pending()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settle_paths() {
        let target = |path| settle_target(path);
        assert_eq!(
            target("/_sim/payments/pay_1/settle"),
            Some((Kind::Payment, "pay_1".into()))
        );
        assert_eq!(
            target("/_sim/refunds/re_1/settle"),
            Some((Kind::Refund, "re_1".into()))
        );
        assert_eq!(
            target("/_sim/resources/res_1/settle"),
            Some((Kind::Resource, "res_1".into()))
        );
        assert_eq!(target("/_sim/payments//settle"), None);
        assert_eq!(target("/_sim/payments/a/b/settle"), None);
        assert_eq!(target("/_sim/payments/pay_1"), None);
        assert_eq!(target("/_sim/charges/pay_1/settle"), None);
        assert_eq!(target("/_sim/settle"), None);
    }
}
