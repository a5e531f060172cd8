//! Exactly-once out: the messages a handler emits
//! ([`crate::engine::Completion::emit`]) are kept on its key's COMPLETED
//! item (attribute `outbox`), written by the very write that completes the
//! key, in the transaction of its effect: a record's messages exist if and
//! only if its effect applied. After the commit the engine sends them, each
//! under an id derived from the key and its place among the record's
//! messages ([`message_id`]), the same on every attempt, and clears the
//! outbox (fenced on the item's owner). A record counts as finished only
//! once its messages were accepted; a redelivery of it finds the outbox
//! still there and sends what was left; the operator's sweeper sends what
//! never comes back.
//!
//! This module only names them; each half lives with its owner:
//! - what the item keeps is the store's (`store/outbox.rs`): the
//!   [`Message`]s, their attribute ([`encode`], [`decode`],
//!   [`MAX_OUTBOX_BYTES`]), their ids ([`message_id`]) and what an item
//!   still has to send ([`Pending`]);
//! - sending them is the engine's: the send port (`engine/send.rs`:
//!   [`Sender`], the edge's; [`Outgoing`], [`SendError`], [`Answers`]) and
//!   when they are sent (`engine/deliver.rs`: [`sent_after_commit`]).

pub use crate::engine::deliver::sent_after_commit;
pub use crate::engine::send::{Answers, Outgoing, SendError, Sender};
pub use crate::store::outbox::{MAX_OUTBOX_BYTES, Message, Pending, decode, encode, message_id};
