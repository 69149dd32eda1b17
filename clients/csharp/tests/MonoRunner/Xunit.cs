// The smallest stand-in for xunit that lets the suite compile with Mono's mcs where the .NET SDK and
// NuGet are not available: [Fact] (with Skip), [Theory] with [InlineData], and the seven asserts the
// suite calls, with xunit 2's meaning (Throws/ThrowsAsync want the exact type, ThrowsAnyAsync a
// derived one too). Not part of the xunit build: the test csproj does not include this folder.
using System;
using System.Collections;
using System.Linq;
using System.Threading.Tasks;

namespace Xunit
{
    [AttributeUsage(AttributeTargets.Method)]
    public class FactAttribute : Attribute
    {
        public string Skip { get; set; }
    }

    public sealed class TheoryAttribute : FactAttribute { }

    [AttributeUsage(AttributeTargets.Method, AllowMultiple = true)]
    public sealed class InlineDataAttribute : Attribute
    {
        public InlineDataAttribute(params object[] data) { Data = data; }
        public object[] Data { get; private set; }
    }

    public sealed class AssertFailedException : Exception
    {
        public AssertFailedException(string message) : base(message) { }
    }

    public static class Assert
    {
        public static void True(bool condition, string message = null)
        {
            if (!condition) throw new AssertFailedException(message ?? "expected true");
        }

        public static void False(bool condition, string message = null) { True(!condition, message ?? "expected false"); }

        public static void Null(object actual) { True(actual == null, "expected null, got " + actual); }

        public static void Equal<T>(T expected, T actual)
        {
            bool same = expected is IEnumerable && actual is IEnumerable && !(expected is string)
                ? ((IEnumerable)expected).Cast<object>().SequenceEqual(((IEnumerable)actual).Cast<object>())
                : Equals(expected, actual);
            True(same, "expected " + expected + ", got " + actual);
        }

        public static T Throws<T>(Action code) where T : Exception
        {
            try { code(); } catch (Exception e) { return Check<T>(e, true); }
            throw new AssertFailedException("expected " + typeof(T).Name + ", nothing was thrown");
        }

        public static Task<T> ThrowsAsync<T>(Func<Task> code) where T : Exception { return Catch<T>(code, true); }

        public static Task<T> ThrowsAnyAsync<T>(Func<Task> code) where T : Exception { return Catch<T>(code, false); }

        private static async Task<T> Catch<T>(Func<Task> code, bool exact) where T : Exception
        {
            try { await code(); } catch (Exception e) { return Check<T>(e, exact); }
            throw new AssertFailedException("expected " + typeof(T).Name + ", nothing was thrown");
        }

        private static T Check<T>(Exception e, bool exact) where T : Exception
        {
            True(exact ? e.GetType() == typeof(T) : e is T, "expected " + typeof(T).Name + ", got " + e.GetType().Name + ": " + e.Message);
            return (T)e;
        }
    }
}
