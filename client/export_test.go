package client

// HangUpGrace is hangUpGrace, for the tests of the client package.
const HangUpGrace = hangUpGrace
