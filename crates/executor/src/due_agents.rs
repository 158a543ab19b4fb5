//! Claiming on Citus, agent by agent (docs/scale-out.md): Citus refuses `FOR UPDATE` in
//! a query that spans shards, so the executor learns which agents have events due (a
//! lock-free read on every shard) and claims one agent's events at a time, a statement
//! that runs on the one node holding that agent. Agents take turns: one whose claim
//! came back full goes to the back of the queue, one that had less is dropped until it
//! is found again. The agents are looked for again once the queue is empty and at
//! least every second, so that a new agent does not wait behind a busy one.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use opgate_store::{ClaimedOperation, Store, StoreError};

/// How many agents one look finds at most.
const AGENTS_PER_LOOK: i64 = 256;
const LOOK_AGAIN_EVERY: Duration = Duration::from_secs(1);

#[derive(Default)]
pub struct DueAgents {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    queue: VecDeque<String>,
    last_look: Option<Instant>,
}

impl DueAgents {
    /// Claims up to `wanted` events of the next agent with any; empty when no agent
    /// has events due.
    pub async fn claim(
        &self,
        store: &Store,
        owner: &str,
        lease: Duration,
        wanted: usize,
    ) -> Result<Vec<ClaimedOperation>, StoreError> {
        let mut looked = false;
        loop {
            let (next, stale) = {
                let mut state = self.state.lock().unwrap();
                let stale = state
                    .last_look
                    .is_none_or(|at| at.elapsed() >= LOOK_AGAIN_EVERY);
                (state.queue.pop_front(), stale)
            };
            let agent = match next {
                Some(agent) if looked || !stale => agent,
                next => {
                    if looked {
                        return Ok(Vec::new());
                    }
                    looked = true;
                    self.look(store, next).await?;
                    continue;
                }
            };
            let claimed = store
                .claim_due_operations_of_agent(owner, lease, wanted as i64, &agent)
                .await?;
            if claimed.len() == wanted {
                self.state.lock().unwrap().queue.push_back(agent);
            }
            if !claimed.is_empty() {
                return Ok(claimed);
            }
        }
    }

    /// Adds the agents with events due to the queue (`held`, taken from its front,
    /// goes back first).
    async fn look(&self, store: &Store, held: Option<String>) -> Result<(), StoreError> {
        let found = store.due_agents(AGENTS_PER_LOOK).await;
        let mut state = self.state.lock().unwrap();
        if let Some(agent) = held {
            state.queue.push_front(agent);
        }
        state.last_look = Some(Instant::now());
        for agent in found? {
            if !state.queue.contains(&agent) {
                state.queue.push_back(agent);
            }
        }
        Ok(())
    }
}
