// The WebSocket to /ws: connects, hands every message of every frame to the
// page in order, and reconnects by itself with backoff when the socket
// closes or goes silent.

import { decodeFrame } from './messages.js';

const BACKOFF_MIN_MS = 250;
const BACKOFF_MAX_MS = 5000;
const WATCHDOG_MIN_MS = 5000; // a socket silent this long (no tick) is treated as dead

// wsURL is the WebSocket URL of path on this page's host, with params.
export function wsURL(path, params) {
  const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
  return proto + '//' + location.host + path + '?' + new URLSearchParams(params).toString();
}

export class Stream {
  // onMessage(m) runs for each message; onChange() when the socket opens or closes.
  constructor(onMessage, onChange) {
    this.onMessage = onMessage;
    this.onChange = onChange;
    this.url = '';
    this.socket = null;
    this.connected = false;
    this.attempt = 0;
    this.tickMs = 100;
    this.reconnectTimer = 0;
    this.watchdogTimer = 0;
    this.armedAt = 0;
  }

  // open watches url, replacing any socket open now.
  open(url) {
    this.close();
    this.url = url;
    this.attempt = 0;
    this.connect();
  }

  close() {
    clearTimeout(this.reconnectTimer);
    this.reconnectTimer = 0;
    this.drop();
  }

  // healthy is called when the server said hello: backoff starts afresh.
  healthy(tickMs) {
    this.attempt = 0;
    if (tickMs > 0) this.tickMs = tickMs;
  }

  // retry connects now if no socket is open (e.g. the network came back).
  retry() {
    if (!this.socket && this.url) this.connect();
  }

  connect() {
    clearTimeout(this.reconnectTimer);
    this.reconnectTimer = 0;
    let ws;
    try {
      ws = new WebSocket(this.url);
    } catch (e) {
      this.scheduleReconnect();
      return;
    }
    this.socket = ws;
    ws.addEventListener('open', () => {
      if (this.socket !== ws) return;
      this.connected = true;
      this.armWatchdog();
      this.onChange();
    });
    ws.addEventListener('message', (ev) => {
      if (this.socket !== ws) return;
      this.armWatchdog();
      if (typeof ev.data !== 'string') return;
      for (const m of decodeFrame(ev.data)) {
        this.onMessage(m);
        if (this.socket !== ws) return; // a handler switched windows
      }
    });
    ws.addEventListener('close', () => {
      if (this.socket !== ws) return;
      this.drop();
      this.scheduleReconnect();
    });
  }

  drop() {
    const ws = this.socket;
    const was = this.connected;
    this.socket = null;
    this.connected = false;
    clearTimeout(this.watchdogTimer);
    this.watchdogTimer = 0;
    if (ws) {
      try {
        ws.close(1000);
      } catch (e) { /* already closed */ }
    }
    if (was) this.onChange();
  }

  // scheduleReconnect backs off exponentially with jitter: 250 ms doubling
  // up to 5 s, each delay drawn from its upper half so many tabs don't
  // reconnect in lockstep.
  scheduleReconnect() {
    if (this.reconnectTimer || !this.url) return;
    const base = Math.min(BACKOFF_MAX_MS, BACKOFF_MIN_MS * Math.pow(2, this.attempt));
    this.attempt++;
    const delay = base / 2 + Math.random() * base / 2;
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = 0;
      this.connect();
    }, delay);
  }

  // armWatchdog replaces a socket that stops delivering (a dead peer or
  // network). Re-arming costs a timer per message, so it is done at most
  // every 250 ms.
  armWatchdog() {
    const p = performance.now();
    if (this.watchdogTimer && p - this.armedAt < 250) return;
    this.armedAt = p;
    clearTimeout(this.watchdogTimer);
    const ms = Math.max(WATCHDOG_MIN_MS, this.tickMs * 20);
    this.watchdogTimer = setTimeout(() => {
      this.watchdogTimer = 0;
      if (!this.socket) return;
      this.drop();
      this.scheduleReconnect();
    }, ms + 250);
  }
}
