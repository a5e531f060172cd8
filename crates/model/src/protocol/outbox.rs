//! The outbox: a completion's message kept on its key's COMPLETED item (by
//! the very write that completes it), sent once the worker's lanes are done
//! to a destination that keeps what it accepted, each message under its
//! stable id; the item's outbox cleared once they were accepted (fenced on
//! the owner it was completed under). A record whose messages were not
//! accepted is reported; its redelivery finds them on the item and sends
//! them again.

use exactly_once_core::outbox::{self, Message, Pending, sent_after_commit};

use super::{Action, Delivered, Delivery, Flag, Op, Protocol, Slot, State};

/// Where every message goes.
const QUEUE: &str = "https://sqs.eu-west-1.amazonaws.com/0/next-hop";

impl Protocol {
    /// The messages a completion of `key` emits: one, where the scope
    /// emits any.
    pub(super) fn messages(&self, key: u8) -> Vec<Message> {
        match self.scope.emits {
            true => vec![Message::new(QUEUE, format!("effect of k{key}"))],
            false => Vec::new(),
        }
    }

    /// The outbox a completion of `key` writes on its item.
    pub(super) fn outbox(&self, key: u8) -> Option<String> {
        outbox::encode(&self.messages(key))
    }

    /// The record (key) and place among its messages of the message with
    /// `body`.
    pub(super) fn message_of(&self, body: &str) -> Option<(u8, usize)> {
        (0..self.keys as u8).find_map(|key| {
            let place = self.messages(key).iter().position(|m| m.body == body)?;
            Some((key, place))
        })
    }

    /// Whether the destination accepted every message of `key`.
    pub(super) fn delivered(&self, state: &State, key: u8) -> bool {
        self.messages(key)
            .iter()
            .all(|m| state.destination.iter().any(|d| d.body == m.body))
    }

    /// The steps of worker `w`'s delivery, once its lanes are done: its
    /// records' messages sent (accepted, or with a fault left, their answer
    /// lost or the request lost), then the outboxes of those accepted
    /// cleared.
    pub(super) fn delivery_actions(&self, state: &State, w: usize, actions: &mut Vec<Action>) {
        let slots = &state.workers[w].slots;
        let id = w as u8;
        let lanes_done = slots.iter().all(|slot| {
            matches!(
                slot,
                Slot::Done | Slot::Unfinished | Slot::Unsent { .. } | Slot::Sent { .. }
            )
        });
        if !lanes_done {
            return;
        }
        if slots.iter().any(|slot| matches!(slot, Slot::Unsent { .. })) {
            actions.push(Action::Send(id, Delivery::Accepted));
            if state.faults < self.scope.destination_faults {
                actions.push(Action::Send(id, Delivery::AnswerLost));
                actions.push(Action::Send(id, Delivery::Lost));
            }
        } else if slots.iter().any(|slot| matches!(slot, Slot::Sent { .. })) {
            actions.push(Action::Clear(id));
        }
    }

    /// Worker `w` sends the messages still to send of its records: those
    /// accepted and heard so wait for their outbox to be cleared; the
    /// others are reported (delivered again).
    pub(super) fn send_messages(&self, state: &mut State, w: usize, delivery: Delivery) {
        if delivery != Delivery::Accepted {
            state.faults += 1;
        }
        for index in 0..state.workers[w].slots.len() {
            let Slot::Unsent { owner } = state.workers[w].slots[index].clone() else {
                continue;
            };
            let key = self.scope.workers[w].keys[index];
            if delivery != Delivery::Lost {
                self.accept(state, key, &owner);
            }
            state.workers[w].slots[index] = match delivery {
                Delivery::Accepted => Slot::Sent { owner },
                Delivery::AnswerLost | Delivery::Lost => Slot::Unfinished,
            };
        }
    }

    /// Worker `w` clears the outboxes of its records whose messages were
    /// accepted (each fenced on the owner its item was completed under):
    /// they are finished.
    pub(super) fn clear(&self, state: &mut State, w: usize) {
        for index in 0..state.workers[w].slots.len() {
            let Slot::Sent { owner } = state.workers[w].slots[index].clone() else {
                continue;
            };
            state.workers[w].slots[index] = Slot::Done;
            self.send(state, w, index, Op::ClearOutbox { owner });
        }
    }

    /// A handler returned its completion of `key` (run under `owner`): its
    /// messages wait for the commit, unless the order is mutated
    /// ([`sent_after_commit`]): then they are sent now.
    pub(super) fn handler_returned(&self, state: &mut State, key: u8, owner: &str) {
        if !sent_after_commit() {
            self.accept(state, key, owner);
        }
    }

    /// The destination accepts the messages of `key`'s completion under
    /// `owner`, each under the id the engine sends it with
    /// ([`Pending::outgoing`]).
    fn accept(&self, state: &mut State, key: u8, owner: &str) {
        let pk = Self::pk(key);
        let Some(pending) = Pending::emitted(&pk, owner, &self.messages(key)) else {
            return;
        };
        for (_, outgoing) in pending.outgoing() {
            let delivered = Delivered {
                body: outgoing.body,
                id: outgoing.id,
            };
            match state.destination.binary_search(&delivered) {
                Ok(_) => state.flags.note(Flag::MessageCopy),
                Err(at) => state.destination.insert(at, delivered),
            }
        }
    }
}
