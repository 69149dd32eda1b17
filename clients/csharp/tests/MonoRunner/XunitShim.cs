// A stand-in for the part of xunit the suite uses ([Fact] with Skip, [Theory] with [InlineData], and
// Assert), so the same test files compile with Mono's mcs where the .NET SDK and NuGet packages are
// not available. The semantics follow xunit 2: Throws/ThrowsAsync want the exact exception type, the
// *Any* forms accept derived types. Not part of the xunit build (the test csproj does not include this folder).
using System;
using System.Collections;
using System.Threading.Tasks;

namespace Xunit
{
    /// <summary>Marks a test method; a non-null Skip skips it.</summary>
    [AttributeUsage(AttributeTargets.Method, AllowMultiple = false)]
    public class FactAttribute : Attribute
    {
        /// <summary>Why the test is skipped, or null to run it.</summary>
        public string Skip { get; set; }

        /// <summary>Name shown instead of the method name.</summary>
        public string DisplayName { get; set; }
    }

    /// <summary>Marks a test method run once per <see cref="InlineDataAttribute"/>, with its arguments.</summary>
    [AttributeUsage(AttributeTargets.Method, AllowMultiple = false)]
    public class TheoryAttribute : FactAttribute
    {
    }

    /// <summary>One set of arguments of a <see cref="TheoryAttribute"/> test.</summary>
    [AttributeUsage(AttributeTargets.Method, AllowMultiple = true)]
    public class InlineDataAttribute : Attribute
    {
        /// <summary>The arguments, in parameter order.</summary>
        public InlineDataAttribute(params object[] data) { Data = data; }

        /// <summary>The arguments, in parameter order.</summary>
        public object[] Data { get; private set; }
    }

    /// <summary>A failed assertion.</summary>
    public class AssertFailedException : Exception
    {
        /// <summary>Creates the failure with its message.</summary>
        public AssertFailedException(string message) : base(message) { }
    }

    /// <summary>The assertions of xunit that the suite uses.</summary>
    public static class Assert
    {
        public static void True(bool condition) { True(condition, null); }

        public static void True(bool condition, string message)
        {
            if (!condition) throw new AssertFailedException(message ?? "expected true, got false");
        }

        public static void False(bool condition) { False(condition, null); }

        public static void False(bool condition, string message)
        {
            if (condition) throw new AssertFailedException(message ?? "expected false, got true");
        }

        public static void Null(object actual)
        {
            if (actual != null) throw new AssertFailedException("expected null, got " + Show(actual));
        }

        public static void Equal<T>(T expected, T actual)
        {
            if (AreEqual(expected, actual)) return;
            throw new AssertFailedException("expected " + Show(expected) + ", got " + Show(actual));
        }

        public static T Throws<T>(Action code) where T : Exception
        {
            return Check<T>(Catch(code), true);
        }

        public static T Throws<T>(Func<object> code) where T : Exception
        {
            return Check<T>(Catch(() => code()), true);
        }

        public static T ThrowsAny<T>(Action code) where T : Exception
        {
            return Check<T>(Catch(code), false);
        }

        public static async Task<T> ThrowsAsync<T>(Func<Task> code) where T : Exception
        {
            return Check<T>(await CatchAsync(code), true);
        }

        public static async Task<T> ThrowsAnyAsync<T>(Func<Task> code) where T : Exception
        {
            return Check<T>(await CatchAsync(code), false);
        }

        private static Exception Catch(Action code)
        {
            try { code(); return null; }
            catch (Exception e) { return e; }
        }

        private static async Task<Exception> CatchAsync(Func<Task> code)
        {
            try { await code(); return null; }
            catch (Exception e) { return e; }
        }

        private static T Check<T>(Exception e, bool exact) where T : Exception
        {
            if (e == null)
                throw new AssertFailedException("expected " + typeof(T).Name + ", nothing was thrown");
            bool ok = exact ? e.GetType() == typeof(T) : e is T;
            if (!ok)
                throw new AssertFailedException("expected " + typeof(T).Name + ", got " + e.GetType().Name + ": " + e.Message);
            return (T)e;
        }

        private static bool AreEqual(object a, object b)
        {
            if (a == null || b == null) return a == null && b == null;
            if (a is IEnumerable && b is IEnumerable && !(a is string) && !(b is string))
            {
                IEnumerator x = ((IEnumerable)a).GetEnumerator(), y = ((IEnumerable)b).GetEnumerator();
                while (true)
                {
                    bool mx = x.MoveNext(), my = y.MoveNext();
                    if (mx != my) return false;
                    if (!mx) return true;
                    if (!AreEqual(x.Current, y.Current)) return false;
                }
            }
            return a.Equals(b);
        }

        private static string Show(object o)
        {
            if (o == null) return "null";
            if (o is string) return "\"" + o + "\"";
            if (o is IEnumerable)
            {
                var parts = new System.Collections.Generic.List<string>();
                foreach (object x in (IEnumerable)o) parts.Add(Show(x));
                return "[" + string.Join(", ", parts) + "]";
            }
            return o.ToString();
        }
    }
}
