//! The minter's queue: deficit round robin across tenants by weight, then across each
//! tenant's connections, first come first served within one. Why this policy, and what it
//! promises, is in the doc of [`super::core`]. Calls of a server without a policy are all of
//! one tenant ([`Share::NONE`]), so they share by connection alone.
//!
//! Requests are divisible (a batch fills tick by tick), so a turn is not "serve the head if
//! it fits" as in packet DRR: a connection at the front of the round gets a credit of
//! `quantum` IDs and spends it on its requests in order, partly filling the last one. A turn
//! that the tick ends (the sequence ran out) keeps its unspent credit and goes on first at
//! the next tick, so the boundary of a tick never costs a connection its share.

use std::collections::{HashMap, VecDeque};

use super::core::{Pending, Responder};

/// Who is asking, for fairness: the peer address of a gRPC call, hashed. Requests from one
/// key are served first come first served; keys share the sequence space in turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnectionKey(pub u64);

impl ConnectionKey {
    /// The key of a peer address; every call without one (a Unix socket, an in-process
    /// test) shares one key.
    pub fn of_peer(peer: Option<std::net::SocketAddr>) -> ConnectionKey {
        use std::hash::{Hash, Hasher};
        let Some(peer) = peer else { return ConnectionKey(0) };
        // A hasher with fixed keys: the key only tells connections apart, the same for every
        // call of one connection.
        let mut hasher = std::hash::DefaultHasher::new();
        peer.hash(&mut hasher);
        // Odd, so no peer shares the key of calls without one.
        ConnectionKey(hasher.finish() | 1)
    }
}

/// Whose share of a busy minter a request takes beside its connection: its tenant, and the
/// tenant's weight. A tenant with weight 3 gets three turns' worth to another's one, however
/// many connections each has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Share {
    pub tenant: u64,
    pub weight: u32,
}

impl Share {
    /// Every call of a server without a policy.
    pub const NONE: Share = Share { tenant: 0, weight: 1 };
}

/// One connection's waiting requests.
struct Flow<R> {
    /// In arrival order.
    queue: VecDeque<Pending<R>>,
    /// IDs this connection may still take in its current turn; 0 between turns.
    credit: usize,
}

/// What minting one request in its turn came to.
pub enum Turn<B> {
    /// This many IDs given (at most the budget); the request is answered when
    /// [`Pending::is_complete`] says so.
    Gave(usize),
    /// This many IDs given before the generator stopped, and why it stopped.
    Blocked(usize, B),
    /// Nothing more for this request in this tick (the rest of the tick is kept for small
    /// asks): its connection's turn passes to the next, keeping its credit.
    Held,
}

/// How a round of [`FairQueue::serve`] ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Round<B> {
    /// Nothing waits.
    Empty,
    /// Every connection still waiting is held until the next tick.
    Held,
    /// The generator is blocked.
    Blocked(B),
}

/// One tenant's waiting requests, per connection, in turn order.
struct Connections<R> {
    /// IDs a connection takes per turn.
    quantum: usize,
    flows: HashMap<ConnectionKey, Flow<R>>,
    /// The connections with requests waiting, in turn order: the front one has the turn.
    order: VecDeque<ConnectionKey>,
    len: usize,
}

impl<R: Responder> Connections<R> {
    fn new(quantum: usize) -> Connections<R> {
        Connections { quantum: quantum.max(1), flows: HashMap::new(), order: VecDeque::new(), len: 0 }
    }

    /// Requests waiting.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Queues `request` behind the earlier ones of its connection; a connection with nothing
    /// waiting joins the round at its end.
    pub fn push(&mut self, request: Pending<R>) {
        let key = request.connection();
        let flow = self.flows.entry(key).or_insert_with(|| {
            self.order.push_back(key);
            Flow { queue: VecDeque::new(), credit: 0 }
        });
        flow.queue.push_back(request);
        self.len += 1;
    }

    /// Every waiting request, taken out of the queue.
    pub fn drain(&mut self) -> impl Iterator<Item = Pending<R>> + '_ {
        self.order.clear();
        self.len = 0;
        self.flows.drain().flat_map(|(_, flow)| flow.queue)
    }

    /// Keeps the requests for which `keep` is true, and hands the others to `removed`.
    pub fn retain(&mut self, mut keep: impl FnMut(&Pending<R>) -> bool, mut removed: impl FnMut(Pending<R>)) {
        let mut removed_any = false;
        for flow in self.flows.values_mut() {
            if flow.queue.iter().all(&mut keep) {
                continue;
            }
            removed_any = true;
            let mut kept = VecDeque::with_capacity(flow.queue.len());
            for request in flow.queue.drain(..) {
                if keep(&request) {
                    kept.push_back(request);
                } else {
                    self.len -= 1;
                    removed(request);
                }
            }
            flow.queue = kept;
        }
        if !removed_any {
            return;
        }
        self.flows.retain(|_, flow| !flow.queue.is_empty());
        self.order.retain(|key| self.flows.contains_key(key));
    }

    /// Every waiting request.
    pub fn iter(&self) -> impl Iterator<Item = &Pending<R>> {
        self.flows.values().flat_map(|flow| flow.queue.iter())
    }

    /// Every waiting request.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Pending<R>> {
        self.flows.values_mut().flat_map(|flow| flow.queue.iter_mut())
    }

    /// Serves this tenant's requests in turn, spending at most `budget` IDs (its tenant's
    /// turn): `mint` gives the request at the head of the connection whose turn it is as many
    /// IDs as it can within the connection's credit and the budget, `done` takes every request
    /// that is complete, and every one whose caller has gone. Ends when nothing waits, when
    /// every connection still waiting is held, when `mint` is blocked (the blocked turn goes on
    /// first at the next call, with the credit it has left), or when the budget is spent (the
    /// connection whose turn it was goes on first at the tenant's next turn).
    fn serve_within<B>(
        &mut self,
        budget: &mut usize,
        mint: &mut impl FnMut(&mut Pending<R>, usize) -> Turn<B>,
        done: &mut impl FnMut(Pending<R>),
    ) -> Inner<B> {
        // Connections held one after the other: once every one in the round is, stop.
        let mut held_in_a_row = 0;
        while let Some(&key) = self.order.front() {
            if held_in_a_row >= self.order.len() {
                return Inner::Held;
            }
            if *budget == 0 {
                return Inner::Spent;
            }
            let flow = self.flows.get_mut(&key).expect("every connection in the round has a flow");
            if flow.credit == 0 {
                flow.credit = self.quantum;
            }
            let mut blocked = None;
            let mut held = false;
            while flow.credit > 0
                && *budget > 0
                && let Some(head) = flow.queue.front_mut()
            {
                if head.reply_closed() {
                    done(flow.queue.pop_front().expect("the head exists"));
                    self.len -= 1;
                    continue;
                }
                let gave = match mint(head, flow.credit.min(*budget)) {
                    Turn::Gave(gave) => gave,
                    Turn::Blocked(gave, why) => {
                        blocked = Some(why);
                        gave
                    }
                    Turn::Held => {
                        held = true;
                        break;
                    }
                };
                flow.credit = flow.credit.saturating_sub(gave);
                *budget = budget.saturating_sub(gave);
                if head.is_complete() {
                    done(flow.queue.pop_front().expect("the head exists"));
                    self.len -= 1;
                }
                if blocked.is_some() {
                    break;
                }
            }
            held_in_a_row = if held { held_in_a_row + 1 } else { 0 };
            if flow.queue.is_empty() {
                // Nothing left to spend the credit on: as in DRR, an idle connection keeps
                // no credit, or it could come back with a burst.
                self.flows.remove(&key);
                self.order.pop_front();
            } else if flow.credit == 0 || held {
                self.order.rotate_left(1);
            }
            if let Some(why) = blocked {
                return Inner::Blocked(why);
            }
        }
        Inner::Empty
    }
}

/// How one tenant's turn ended.
enum Inner<B> {
    Empty,
    Held,
    Blocked(B),
    /// Its turn's IDs are spent: the next tenant's turn.
    Spent,
}

/// One tenant's waiting requests.
struct Tenant<R> {
    weight: u32,
    /// IDs it may still take in its current turn; 0 between turns.
    credit: usize,
    connections: Connections<R>,
}

/// Waiting requests, per tenant and connection, in turn order.
pub struct FairQueue<R> {
    /// IDs a connection takes per turn; a tenant's turn is this times its weight.
    quantum: usize,
    tenants: HashMap<u64, Tenant<R>>,
    /// The tenants with requests waiting, in turn order: the front one has the turn.
    order: VecDeque<u64>,
    len: usize,
}

impl<R: Responder> FairQueue<R> {
    pub fn new(quantum: usize) -> FairQueue<R> {
        FairQueue { quantum: quantum.max(1), tenants: HashMap::new(), order: VecDeque::new(), len: 0 }
    }

    /// Requests waiting.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Queues `request` behind the earlier ones of its connection; a tenant with nothing
    /// waiting joins the round at its end (with the weight its request says).
    pub fn push(&mut self, request: Pending<R>) {
        let share = request.share();
        let quantum = self.quantum;
        let tenant = self.tenants.entry(share.tenant).or_insert_with(|| {
            self.order.push_back(share.tenant);
            Tenant { weight: share.weight.max(1), credit: 0, connections: Connections::new(quantum) }
        });
        // A reloaded policy's weight, from the tenant's next turn.
        tenant.weight = share.weight.max(1);
        tenant.connections.push(request);
        self.len += 1;
    }

    /// Every waiting request, taken out of the queue.
    pub fn drain(&mut self) -> impl Iterator<Item = Pending<R>> + '_ {
        self.order.clear();
        self.len = 0;
        self.tenants.drain().flat_map(|(_, mut tenant)| tenant.connections.drain().collect::<Vec<_>>())
    }

    /// Keeps the requests for which `keep` is true, and hands the others to `removed`.
    pub fn retain(&mut self, mut keep: impl FnMut(&Pending<R>) -> bool, mut removed: impl FnMut(Pending<R>)) {
        for tenant in self.tenants.values_mut() {
            let before = tenant.connections.len();
            tenant.connections.retain(&mut keep, &mut removed);
            self.len -= before - tenant.connections.len();
        }
        self.tenants.retain(|_, tenant| !tenant.connections.is_empty());
        self.order.retain(|key| self.tenants.contains_key(key));
    }

    /// Every waiting request.
    pub fn iter(&self) -> impl Iterator<Item = &Pending<R>> {
        self.tenants.values().flat_map(|tenant| tenant.connections.iter())
    }

    /// Every waiting request.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Pending<R>> {
        self.tenants.values_mut().flat_map(|tenant| tenant.connections.iter_mut())
    }

    /// Serves requests in turn: tenants by weight, and within a tenant's turn its connections
    /// in turn. `mint` gives the request at the head of the connection whose turn it is as
    /// many IDs as it can within the budget, `done` takes every request that is complete, and
    /// every one whose caller has gone. Ends when nothing waits, when every tenant still
    /// waiting is held, or when `mint` is blocked; a blocked turn goes on first at the next
    /// call, with the credit it has left.
    pub fn serve<B>(
        &mut self,
        mut mint: impl FnMut(&mut Pending<R>, usize) -> Turn<B>,
        mut done: impl FnMut(Pending<R>),
    ) -> Round<B> {
        let mut held_in_a_row = 0;
        while let Some(&key) = self.order.front() {
            if held_in_a_row >= self.order.len() {
                return Round::Held;
            }
            let tenant = self.tenants.get_mut(&key).expect("every tenant in the round has its requests");
            if tenant.credit == 0 {
                tenant.credit = self.quantum.saturating_mul(tenant.weight as usize);
            }
            let before = tenant.connections.len();
            let inner = tenant.connections.serve_within(&mut tenant.credit, &mut mint, &mut done);
            self.len -= before - tenant.connections.len();
            match inner {
                Inner::Empty => {
                    // As in DRR, a tenant with nothing waiting keeps no credit.
                    self.tenants.remove(&key);
                    self.order.pop_front();
                    held_in_a_row = 0;
                }
                Inner::Spent => {
                    tenant.credit = 0;
                    self.order.rotate_left(1);
                    held_in_a_row = 0;
                }
                Inner::Held => {
                    self.order.rotate_left(1);
                    held_in_a_row += 1;
                }
                Inner::Blocked(why) => return Round::Blocked(why),
            }
        }
        Round::Empty
    }
}
