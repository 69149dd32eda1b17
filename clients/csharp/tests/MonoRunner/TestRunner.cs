// Runs every public [Fact] (and [Theory], once per [InlineData]) of this assembly, a fresh instance of
// its class per test as xunit does, awaiting those that return a Task (60 s each). Prints a line per
// test, then "N passed, N failed, N skipped"; exits 1 when a test failed or none passed.
// Usage: mono LockingCenter.Tests.exe [substring-of-test-name ...]
//        mono LockingCenter.Tests.exe --hold ADDRESS TTL_MS KEY...   (the holder the SIGKILL test starts)
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
        private static int Main(string[] args)
        {
            if (args.Length > 0 && args[0] == "--hold") return SessionTests.Hold(args.Skip(1).ToArray());
            int passed = 0, failed = 0, skipped = 0;
            var tests = from t in typeof(TestRunner).Assembly.GetTypes()
                        where t.IsClass && t.IsPublic && !t.IsAbstract
                        orderby t.FullName
                        from m in t.GetMethods(BindingFlags.Public | BindingFlags.Instance)
                        let fact = (FactAttribute)m.GetCustomAttributes(typeof(FactAttribute), true).FirstOrDefault()
                        where fact != null
                        orderby m.MetadataToken
                        from row in m.GetCustomAttributes(typeof(InlineDataAttribute), true).Cast<InlineDataAttribute>()
                            .Select(d => d.Data).DefaultIfEmpty(null)
                        select new { t, m, fact, row };
            foreach (var test in tests)
            {
                string name = test.t.Name + "." + test.m.Name + (test.row == null ? "" : "(" + string.Join(", ", test.row) + ")");
                if (args.Length > 0 && !args.Any(a => name.Contains(a))) continue;
                if (test.fact.Skip != null)
                {
                    skipped++;
                    Console.WriteLine("SKIP " + name + ": " + test.fact.Skip);
                    continue;
                }
                var watch = Stopwatch.StartNew();
                try
                {
                    object instance = Activator.CreateInstance(test.t);
                    var task = test.m.Invoke(instance, test.row) as Task;
                    if (task != null && !task.Wait(TimeSpan.FromSeconds(60))) throw new TimeoutException("test did not finish within 60 s");
                    passed++;
                    Console.WriteLine("PASS " + name + " (" + watch.ElapsedMilliseconds + " ms)");
                }
                catch (Exception e)
                {
                    failed++;
                    while ((e is TargetInvocationException || e is AggregateException) && e.InnerException != null) e = e.InnerException;
                    Console.WriteLine("FAIL " + name + " (" + watch.ElapsedMilliseconds + " ms): " + e.GetType().Name + ": " + e.Message);
                    Console.WriteLine("    " + (e is AssertFailedException ? e.StackTrace : e.ToString()).Replace("\n", "\n    "));
                }
            }
            Console.WriteLine(passed + " passed, " + failed + " failed, " + skipped + " skipped");
            return failed == 0 && passed > 0 ? 0 : 1;
        }
    }
}
