using System;
using System.Collections.Generic;
using System.Threading.Tasks;
using Xunit;

namespace LockingCenter.Tests
{
    /// <summary>The shared vectors: every frame byte for byte, every invalid entry refused, every answer mapped.</summary>
    public class WireVectorsTests
    {
        [Fact]
        public void FramesEncodeByteForByte()
        {
            var frames = Vectors.List("frames");
            Assert.Equal(10, frames.Count);
            foreach (var v in frames)
            {
                byte[] frame = WireFormat.Encode(Vectors.ActionOf(v), (string)v["key"], (string)v["source"]);
                Assert.Equal((string)v["hex"], Vectors.Hex(frame));
            }
        }

        [Fact]
        public async Task FramesSentByTheClientArriveByteForByte()
        {
            foreach (var v in Vectors.List("frames"))
            {
                using (var fake = new FakeServer(f => '+'))
                {
                    var client = new LockingCenterClient(fake.Address, (string)v["source"]);
                    await Call(client, Vectors.ActionOf(v), (string)v["key"]);
                    Assert.Equal(1, fake.Frames.Count);
                    Assert.Equal((string)v["hex"], Vectors.Hex(fake.Frames[0]));
                    Assert.False(fake.HalfClosedEarly[0], "client half-closed before the answer: " + v["name"]);
                }
            }
        }

        [Fact]
        public async Task InvalidEntriesAreRefusedBeforeConnecting()
        {
            string nowhere = "127.0.0.1:" + Vectors.DeadPort();
            var invalid = Vectors.List("invalid");
            Assert.Equal(7, invalid.Count);
            foreach (var v in invalid)
            {
                LockAction action = Vectors.ActionOf(v);
                string key = (string)v["key"];
                string source = (string)v["source"];
                Assert.Throws<InvalidRequestException>(() => WireFormat.Encode(action, key, source));
                if (((string)v["reason"]).StartsWith("source", StringComparison.Ordinal))
                {
                    Assert.Throws<InvalidRequestException>(() => new LockingCenterClient(nowhere, source));
                }
                else
                {
                    // Against an address nothing listens on: the validation error, not
                    // UnreachableException, proves nothing was attempted.
                    var client = new LockingCenterClient(nowhere, source);
                    await Assert.ThrowsAsync<InvalidRequestException>(() => Call(client, action, key));
                }
            }
        }

        [Fact]
        public void AnswersAreTheThreeKnownBytes()
        {
            var answers = Vectors.List("answers");
            Assert.Equal(3, answers.Count);
            Assert.Equal(WireFormat.Ok, Vectors.Hex((string)answers[0]["hex"])[0]);
            Assert.Equal(WireFormat.Fail, Vectors.Hex((string)answers[1]["hex"])[0]);
            Assert.Equal(WireFormat.NotWon, Vectors.Hex((string)answers[2]["hex"])[0]);
        }

        /// <summary>Every answer of the vectors, for every action, maps to its documented outcome.</summary>
        [Fact]
        public async Task AnswersMapToOutcomes()
        {
            int checkedCount = 0;
            foreach (var a in Vectors.List("answers"))
            {
                byte answer = Vectors.Hex((string)a["hex"])[0];
                foreach (LockAction action in Enum.GetValues(typeof(LockAction)))
                {
                    using (var fake = new FakeServer(f => answer))
                    {
                        var client = new LockingCenterClient(fake.Address, "svc");
                        await CheckOutcome(client, action, answer);
                        checkedCount++;
                    }
                }
            }
            Assert.Equal(15, checkedCount);
        }

        private static async Task CheckOutcome(LockingCenterClient client, LockAction action, byte answer)
        {
            string key = action == LockAction.ResetBySource ? "" : "k";
            switch (action)
            {
                case LockAction.Lock:
                    if (answer == '+')
                    {
                        LockHandle held = await client.LockAsync("k");
                        Assert.Equal("k", held.Key);
                        Assert.False(held.IsReleased);
                    }
                    else if (answer == '-')
                        await Assert.ThrowsAsync<ResetWhileWaitingException>(() => client.LockAsync("k"));
                    else
                        await Assert.ThrowsAsync<LockingCenterException>(() => client.LockAsync("k"));
                    break;
                case LockAction.TryLock:
                    if (answer == '+') Assert.True(await client.TryLockAsync("k"));
                    else if (answer == '#')
                    {
                        Assert.False(await client.TryLockAsync("k"));
                        await Assert.ThrowsAsync<NotWonException>(() => client.TryLockOrThrowAsync("k"));
                    }
                    else await Assert.ThrowsAsync<RefusedException>(() => client.TryLockAsync("k"));
                    break;
                default:
                    if (answer == '+') await Call(client, action, key);
                    else if (answer == '-') await Assert.ThrowsAsync<RefusedException>(() => Call(client, action, key));
                    else await Assert.ThrowsAsync<LockingCenterException>(() => Call(client, action, key));
                    break;
            }
        }

        internal static Task Call(LockingCenterClient client, LockAction action, string key)
        {
            switch (action)
            {
                case LockAction.Lock: return client.LockAsync(key);
                case LockAction.Unlock: return client.UnlockAsync(key);
                case LockAction.ResetByKey: return client.ResetByKeyAsync(key);
                case LockAction.TryLock: return client.TryLockAsync(key);
                default:
                    if (!string.IsNullOrEmpty(key)) throw new InvalidOperationException("reset by source takes no key");
                    return client.ResetBySourceAsync();
            }
        }
    }
}
