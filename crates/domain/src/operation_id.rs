//! Operation ids are UUIDv7: a millisecond timestamp, then random bits. Ids made
//! later sort later, so a new operation's primary-key entry (and its audit rows'
//! entries under `operation_id`) go to the right edge of their indexes, and the
//! operations the executor works on, the newest, share a few hot index pages instead
//! of one random page each among millions. 74 random bits keep an id unguessable; the
//! time it shows is the operation's `created_at`, which its owner reads anyway.

use uuid::Uuid;

pub fn new_operation_id() -> Uuid {
    Uuid::now_v7()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_version_7_and_made_in_order() {
        let ids: Vec<Uuid> = (0..1000).map(|_| new_operation_id()).collect();
        assert!(ids.iter().all(|id| id.get_version_num() == 7));
        assert!(ids.windows(2).all(|pair| pair[0] < pair[1]));
    }
}
