using System.Runtime.CompilerServices;

[assembly: InternalsVisibleTo("LockingCenter.Tests")]
