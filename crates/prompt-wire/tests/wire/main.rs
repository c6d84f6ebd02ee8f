//! prompt-wire's behaviour, API by API: the bodies of a scripted session, the replies read
//! back, the guard, and the documented examples.

mod bodies;
mod common;
mod conversation;
mod defects;
mod diagnostics;
mod fixtures;
mod guard;
mod profiles;
mod replies;
mod stream;
mod stream_props;
