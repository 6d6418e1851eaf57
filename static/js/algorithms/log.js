// The sliding-window log: its state is its entries, which the page's
// timeline draws from the stream itself (window-model.js, timeline.js); this
// module only says how the log reads in words.

export default {
  // at is a rule's state at t: the log keeps no numbers to move on.
  at(r) {
    return { used: typeof r.count === 'number' ? r.count : 0, resetAt: null };
  },
  empty() {
    return null;
  },
  phrase: 'the log',
};
