//! Sessions: a caller's cluster kept between `Decide` requests, so that after one full
//! snapshot it sends only what changed (`SnapshotDelta`). A 1,000-node snapshot is ~190 kB and
//! decoding and validating it costs more than deciding on it; a delta of a few dozen jobs
//! costs a few percent of that.
//!
//! Each session holds the world its last answer left (that answer counted as carried out), the
//! snapshot it was opened with (its nodes, for the decision log and compaction) and a revision
//! that each delta must name, so a caller that missed an answer is told to resync instead of
//! getting decisions on a cluster it does not have.

use crate::metrics::Metrics;
use crate::proto;
use crate::world::{MAX_NAME_BYTES, World};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tonic::Status;

/// One session's state.
#[derive(Debug)]
pub struct Session {
    /// The cluster after the last answer; `None` after a request on the session failed
    /// midway (the caller must send a full snapshot).
    pub world: Option<World>,
    /// The snapshot that opened the session (its nodes stand for the cluster's nodes).
    pub base: Arc<proto::Snapshot>,
    /// Answers given since `base`; a delta names the one it follows.
    pub revision: u64,
}

/// A session's lock: requests on one session are answered in turn.
pub type Slot = Arc<tokio::sync::Mutex<Option<Session>>>;

#[derive(Debug)]
struct Entry {
    slot: Slot,
    last_used: Instant,
}

/// The sessions held, bounded in number and idle time.
#[derive(Debug)]
pub struct Sessions {
    map: Mutex<HashMap<String, Entry>>,
    max: usize,
    ttl: Duration,
}

impl Sessions {
    pub fn new(max: usize, ttl: Duration) -> Sessions {
        Sessions {
            map: Mutex::new(HashMap::new()),
            max,
            ttl,
        }
    }

    /// The slot of session `id`, made if new. Expired idle sessions are dropped first; a new
    /// session beyond `max` evicts the least recently used idle one, or is refused.
    pub fn slot(&self, id: &str, metrics: &Metrics) -> Result<Slot, Status> {
        if self.max == 0 {
            return Err(Status::failed_precondition(
                "session: sessions are off here (max_sessions = 0); send full snapshots \
                 without a session",
            ));
        }
        if id.len() > MAX_NAME_BYTES {
            return Err(Status::invalid_argument(format!(
                "session: longer than {MAX_NAME_BYTES} bytes"
            )));
        }
        let (mut map, now) = self.pruned();
        let slot = match map.get_mut(id) {
            Some(e) => {
                e.last_used = now;
                Arc::clone(&e.slot)
            }
            None => {
                if map.len() >= self.max {
                    let idle = map
                        .iter()
                        .filter(|(_, e)| Arc::strong_count(&e.slot) == 1)
                        .min_by_key(|(_, e)| e.last_used)
                        .map(|(k, _)| k.clone());
                    match idle {
                        Some(k) => {
                            map.remove(&k);
                            tracing::info!(evicted = %k, "session evicted for a new one");
                        }
                        None => {
                            return Err(Status::resource_exhausted(format!(
                                "session: all {} sessions are answering requests; retry, or \
                                 send a full snapshot without a session",
                                self.max
                            )));
                        }
                    }
                }
                let slot: Slot = Arc::new(tokio::sync::Mutex::new(None));
                map.insert(
                    id.to_string(),
                    Entry {
                        slot: Arc::clone(&slot),
                        last_used: now,
                    },
                );
                slot
            }
        };
        metrics.sessions.set(map.len() as i64);
        Ok(slot)
    }

    /// The slot of a session held now (its use counts as recent); `None` for one never
    /// opened, expired or evicted. Never makes one, so a stream of deltas on a lost session
    /// cannot push live sessions out.
    pub fn get(&self, id: &str, metrics: &Metrics) -> Option<Slot> {
        let (mut map, now) = self.pruned();
        metrics.sessions.set(map.len() as i64);
        map.get_mut(id).map(|e| {
            e.last_used = now;
            Arc::clone(&e.slot)
        })
    }

    /// The slot of a session held now, without counting as a use (the dashboard looks; it
    /// must not keep a session alive).
    pub fn peek(&self, id: &str) -> Option<Slot> {
        let (map, _) = self.pruned();
        map.get(id).map(|e| Arc::clone(&e.slot))
    }

    /// The ids of the sessions held now, sorted.
    pub fn ids(&self) -> Vec<String> {
        let (map, _) = self.pruned();
        let mut ids: Vec<String> = map.keys().cloned().collect();
        ids.sort();
        ids
    }

    /// The map, locked, with expired idle sessions dropped; and the time that judged them.
    fn pruned(&self) -> (std::sync::MutexGuard<'_, HashMap<String, Entry>>, Instant) {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        // A slot held by a request (count above 1) is in use, however old its last use.
        map.retain(|_, e| {
            Arc::strong_count(&e.slot) > 1 || now.duration_since(e.last_used) < self.ttl
        });
        (map, now)
    }

    /// Sessions held now.
    pub fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_idle_session_makes_room_and_busy_ones_are_kept() {
        let metrics = Metrics::new();
        let sessions = Sessions::new(2, Duration::from_secs(600));
        let a = sessions.slot("a", &metrics).unwrap();
        drop(a);
        let b = sessions.slot("b", &metrics).unwrap(); // held: busy
        let c = sessions.slot("c", &metrics).unwrap(); // evicts "a", the idle one
        assert_eq!(sessions.len(), 2);
        let refused = sessions.slot("d", &metrics).unwrap_err();
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
        drop((b, c));
        sessions.slot("d", &metrics).unwrap();
        assert_eq!(sessions.len(), 2);
        let off = Sessions::new(0, Duration::from_secs(1));
        assert_eq!(
            off.slot("a", &metrics).unwrap_err().code(),
            tonic::Code::FailedPrecondition
        );
    }

    #[test]
    fn idle_sessions_expire() {
        let metrics = Metrics::new();
        let sessions = Sessions::new(8, Duration::from_millis(0));
        drop(sessions.slot("a", &metrics).unwrap());
        drop(sessions.slot("b", &metrics).unwrap());
        assert_eq!(sessions.len(), 1, "a expired when b came");
    }
}
