// Runs every public method marked [Fact] (or a subclass of it, such as [Theory]) in this assembly,
// one fresh instance of its class per test as xunit does, awaiting the ones that return a Task. A
// [Theory] runs once per [InlineData], with its arguments, as "Class.Method(arg, ...)". Prints one
// line per test and then "N passed, N failed, N skipped"; exits 1 when a test failed.
// Usage: mono LockingCenter.Tests.exe [substring-of-test-name ...]
using System;
using System.Diagnostics;
using System.Linq;
using System.Reflection;
using System.Threading.Tasks;
using Xunit;

namespace LockingCenter.Tests
{
    internal static class TestRunner
    {
        private static readonly TimeSpan TestTimeout = TimeSpan.FromSeconds(60);

        private static int Main(string[] args)
        {
            int passed = 0, failed = 0, skipped = 0;
            var tests = typeof(TestRunner).Assembly.GetTypes()
                .Where(t => t.IsClass && t.IsPublic && !t.IsAbstract)
                .OrderBy(t => t.FullName, StringComparer.Ordinal)
                .SelectMany(t => t.GetMethods(BindingFlags.Public | BindingFlags.Instance)
                    .Where(m => m.GetCustomAttributes(typeof(FactAttribute), true).Length > 0)
                    .OrderBy(m => m.MetadataToken)
                    .SelectMany(m => Cases(m).Select(row => new { Type = t, Method = m, Args = row })));
            foreach (var test in tests)
            {
                string name = test.Type.Name + "." + test.Method.Name
                    + (test.Args == null ? "" : "(" + string.Join(", ", test.Args.Select(a => a == null ? "null" : a.ToString())) + ")");
                if (args.Length > 0 && !args.Any(a => name.IndexOf(a, StringComparison.Ordinal) >= 0)) continue;
                var fact = (FactAttribute)test.Method.GetCustomAttributes(typeof(FactAttribute), true)[0];
                if (fact.Skip != null)
                {
                    skipped++;
                    Console.WriteLine("SKIP " + name + ": " + fact.Skip);
                    continue;
                }
                var watch = Stopwatch.StartNew();
                try
                {
                    object instance = Activator.CreateInstance(test.Type);
                    try
                    {
                        object result = test.Method.Invoke(instance, test.Args);
                        var task = result as Task;
                        if (task != null && !task.Wait(TestTimeout))
                            throw new TimeoutException("test did not finish within " + TestTimeout.TotalSeconds + " s");
                    }
                    finally
                    {
                        var disposable = instance as IDisposable;
                        if (disposable != null) disposable.Dispose();
                    }
                    passed++;
                    Console.WriteLine("PASS " + name + " (" + watch.ElapsedMilliseconds + " ms)");
                }
                catch (Exception e)
                {
                    failed++;
                    Exception cause = Unwrap(e);
                    Console.WriteLine("FAIL " + name + " (" + watch.ElapsedMilliseconds + " ms): "
                        + cause.GetType().Name + ": " + cause.Message);
                    if (!(cause is AssertFailedException)) Console.WriteLine(Indent(cause.ToString()));
                    else Console.WriteLine(Indent(cause.StackTrace ?? ""));
                }
            }
            Console.WriteLine(passed + " passed, " + failed + " failed, " + skipped + " skipped");
            return failed == 0 && passed > 0 ? 0 : 1;
        }

        /// <summary>The argument lists of a test: one per [InlineData] of a [Theory], or just null (no arguments).</summary>
        private static object[][] Cases(MethodInfo method)
        {
            var rows = method.GetCustomAttributes(typeof(InlineDataAttribute), true)
                .Cast<InlineDataAttribute>().Select(d => d.Data).ToArray();
            return rows.Length > 0 ? rows : new object[][] { null };
        }

        private static Exception Unwrap(Exception e)
        {
            while (true)
            {
                if (e is TargetInvocationException && e.InnerException != null) { e = e.InnerException; continue; }
                var agg = e as AggregateException;
                if (agg != null && agg.InnerExceptions.Count == 1) { e = agg.InnerExceptions[0]; continue; }
                return e;
            }
        }

        private static string Indent(string s)
        {
            return "    " + s.Replace("\n", "\n    ");
        }
    }
}
